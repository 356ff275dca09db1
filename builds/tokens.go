package builds

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
)

// Token prefixes as GitLab issues them; gitlab-runner crashes on glrt- tokens under 14
// characters, ours have 5 + 32. A runner registered with a registration token gets glrtr-
// tokens (GitLab's REGISTRATION_RUNNER_TOKEN_PREFIX): gitlab-runner treats only glrt- as a
// "created runner" token, so its unregister deletes such a runner instead of one manager.
const (
	RunnerTokenPrefix           = "glrt-"
	RegisteredRunnerTokenPrefix = "glrtr-"
	JobTokenPrefix              = "glcbt-"
)

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"

// NewToken returns prefix + 32 random characters (192 bits).
func NewToken(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	for i := range b {
		b[i] = tokenAlphabet[int(b[i])%len(tokenAlphabet)]
	}
	return prefix + string(b)
}

// HashToken is how tokens are stored and looked up.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// TokenMatches compares a presented token with a stored hash in constant time.
func TokenMatches(token string, hash []byte) bool {
	if token == "" || len(hash) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(HashToken(token), hash) == 1
}
