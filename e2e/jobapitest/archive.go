package jobapitest

import (
	"archive/zip"
	"compress/flate"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/jobapi/jobapi/runnerclient"
)

// Archive is a zip on disk, as the runner's archiver writes it before (or while) it
// uploads.
type Archive struct {
	Path string
	Size int64
	Sum  [32]byte
}

// MakeZip writes a zip of build/app.bin, n bytes of incompressible data (so the archive is
// about n bytes), then the files of extra. It streams: a 1 GB archive needs no 1 GB of
// memory.
func MakeZip(t testing.TB, n int64, extra map[string]string) Archive {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "artifacts.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	zw := zip.NewWriter(io.MultiWriter(f, h))
	// The runner deflates with the default level; the fastest level makes the same format
	// in a fraction of the test's time.
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestSpeed) })
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "build/app.bin", Method: zip.Deflate})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	if _, err := io.CopyN(w, rng, n); err != nil {
		t.Fatal(err)
	}
	for name, text := range extra {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, text); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	a := Archive{Path: f.Name(), Size: fi.Size()}
	copy(a.Sum[:], h.Sum(nil))
	return a
}

// Content opens the archive anew for each upload attempt, as the runner's retries do.
func (a Archive) Content() runnerclient.Content {
	return func() (io.ReadCloser, error) { return os.Open(a.Path) }
}
