package builds

import "bytes"

// minMaskedLength is GitLab's minimum for a maskable value: shorter ones would mask
// ordinary words.
const minMaskedLength = 8

// maskSecrets hides the values of masked variables in a trace chunk, replacing each with as
// many 'x' as it has bytes (as GitLab's MaskSecret does), so that offsets the runner counts
// stay true. gitlab-runner masks before sending; this is the second line of defence for
// runners that do not. A secret split across two patches is not found, as in GitLab.
func maskSecrets(data []byte, vars []Variable) []byte {
	masked := false
	for _, v := range vars {
		if !v.Masked || len(v.Value) < minMaskedLength {
			continue
		}
		secret := []byte(v.Value)
		if !bytes.Contains(data, secret) {
			continue
		}
		if !masked {
			data = bytes.Clone(data) // never write into the caller's buffer
			masked = true
		}
		data = bytes.ReplaceAll(data, secret, bytes.Repeat([]byte("x"), len(secret)))
	}
	return data
}
