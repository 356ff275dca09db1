// Package secrettoken makes the random tokens jobapi issues (runner, job, trigger and
// personal access tokens: a prefix and 32 characters) and the SHA-256 they are stored and
// looked up as. It knows nothing of builds: each caller brings its own prefix.
package secrettoken

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
)

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"

// New returns prefix + 32 random characters (192 bits).
func New(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	for i := range b {
		b[i] = tokenAlphabet[int(b[i])%len(tokenAlphabet)]
	}
	return prefix + string(b)
}

// Hash is how tokens are stored and looked up.
func Hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// Matches compares a presented token with a stored hash in constant time.
func Matches(token string, hash []byte) bool {
	if token == "" || len(hash) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(Hash(token), hash) == 1
}
