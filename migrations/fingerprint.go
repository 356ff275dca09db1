package migrations

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
)

// Fingerprint identifies the embedded schema: a hex SHA-256 over every file's name and
// contents, in name order. Tests name their migrated template database after it, so a
// changed or added migration gets a fresh template instead of a stale one.
func Fingerprint() string {
	names, err := fs.Glob(files, "*.sql") // sorted, as ReadDir is
	if err != nil {
		panic(err) // only a malformed pattern fails
	}
	h := sha256.New()
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		// Lengths keep "a"+"bc" and "ab"+"c" apart.
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
