package builds

import "bytes"

// MinMaskedLength is GitLab's minimum for a maskable value: shorter ones would mask
// ordinary words.
const MinMaskedLength = 8

// maskSecrets hides the values of masked variables in a trace chunk, replacing each with as
// many 'x' as it has bytes (as GitLab's MaskSecret does), so that offsets the runner counts
// stay true. gitlab-runner masks before sending; this is the second line of defence for
// runners that do not. The job's own token (the one the PATCH came with) is masked too: a
// runner that does not mask would otherwise store a live credential in the log. A secret
// split across two patches is not found, as in GitLab.
func maskSecrets(data []byte, vars []Variable, jobToken string) []byte {
	masked := false
	mask := func(secret string) {
		if len(secret) < MinMaskedLength || !bytes.Contains(data, []byte(secret)) {
			return
		}
		if !masked {
			data = bytes.Clone(data) // never write into the caller's buffer
			masked = true
		}
		data = bytes.ReplaceAll(data, []byte(secret), bytes.Repeat([]byte("x"), len(secret)))
	}
	for _, v := range vars {
		if v.Masked {
			mask(v.Value)
		}
	}
	mask(jobToken)
	return data
}
