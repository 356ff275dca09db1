package artifacts

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// runCheck feeds data to a check in uneven writes, as an upload's reads would, and returns
// the verdict: the first Write error, else Close's.
func runCheck(format string, data []byte) error {
	c := newArchiveCheck(format)
	rng := rand.New(rand.NewPCG(1, 2))
	for len(data) > 0 {
		n := min(len(data), 1+rng.IntN(40000))
		if _, err := c.Write(data[:n]); err != nil {
			c.Abort()
			return err
		}
		data = data[n:]
	}
	return c.Close()
}

func noisy(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		// Half random, half runs: both stored and compressed deflate blocks.
		if i%1000 < 500 {
			b[i] = byte(rng.Uint32())
		} else {
			b[i] = 'a' + byte(i%7)
		}
	}
	return b
}

// runnerZip is an archive as gitlab-runner's zip archiver writes it (helpers/archives
// zip_create.go): directories, deflated files and symlinks with data descriptors, the
// EFS flag.
func runnerZip(t *testing.T, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	add := func(name string, method uint16, data []byte) {
		fh := &zip.FileHeader{Name: name, Method: method, Flags: 0x800, Modified: time.Unix(1700000000, 0)}
		f, err := w.CreateHeader(fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add("build/", zip.Store, nil)
	add("build/app.bin", zip.Deflate, noisy(size, 1))
	add("build/empty.txt", zip.Deflate, nil)
	add("build/link", zip.Deflate, []byte("app.bin"))
	add("build/notes-ü.txt", zip.Deflate, []byte(strings.Repeat("line\n", size/60)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// knownSizesZip has entries whose header carries CRC-32 and sizes (no data descriptor), as
// fastzip and most tools write them, stored and deflated.
func knownSizesZip(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	stored := noisy(20_000, 3)
	f, err := w.CreateRaw(&zip.FileHeader{Name: "stored.bin", Method: zip.Store, CRC32: crc32.ChecksumIEEE(stored),
		CompressedSize64: uint64(len(stored)), UncompressedSize64: uint64(len(stored))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(stored); err != nil {
		t.Fatal(err)
	}
	if err := w.SetComment("made by a test"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t *testing.T, members ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, m := range members {
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(m); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestArchiveCheckAcceptsWholeArchives(t *testing.T) {
	t.Parallel()
	var empty bytes.Buffer
	if err := zip.NewWriter(&empty).Close(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		format string
		data   []byte
	}{
		"runner zip":          {builds.ArtifactFormatZip, runnerZip(t, 300_000)},
		"zip with sizes":      {builds.ArtifactFormatZip, knownSizesZip(t)},
		"empty zip":           {builds.ArtifactFormatZip, empty.Bytes()},
		"gzip":                {builds.ArtifactFormatGzip, gzipped(t, []byte(strings.Repeat("<testcase/>", 10000)))},
		"gzip of two members": {builds.ArtifactFormatGzip, gzipped(t, []byte("<a/>"), noisy(50_000, 9))},
	} {
		if err := runCheck(c.format, c.data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if newArchiveCheck(builds.ArtifactFormatRaw) != nil {
		t.Error("raw data has no checksum to check, yet got a check")
	}
}

// Every archive cut short anywhere is refused: the upload broke off, or a proxy dropped
// its end.
func TestArchiveCheckRefusesEveryTruncation(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		format string
		data   []byte
	}{
		"runner zip":     {builds.ArtifactFormatZip, runnerZip(t, 20_000)},
		"zip with sizes": {builds.ArtifactFormatZip, knownSizesZip(t)},
		"gzip":           {builds.ArtifactFormatGzip, gzipped(t, noisy(20_000, 4))},
	} {
		step := max(1, len(c.data)/400)
		for n := 0; n < len(c.data); n += step {
			if err := runCheck(c.format, c.data[:n]); !isArchiveError(err) {
				t.Fatalf("%s cut to %d of %d bytes: %v, want an ArchiveError", name, n, len(c.data), err)
			}
		}
		// And around the end, byte by byte.
		for n := max(0, len(c.data)-120); n < len(c.data); n++ {
			if err := runCheck(c.format, c.data[:n]); !isArchiveError(err) {
				t.Fatalf("%s cut to %d of %d bytes: %v, want an ArchiveError", name, n, len(c.data), err)
			}
		}
	}
}

func isArchiveError(err error) bool {
	var ae *ArchiveError
	return errors.As(err, &ae)
}

// A byte changed in transit is found by a checksum or a size: in compressed data, stored
// data, a header, the central directory.
func TestArchiveCheckRefusesDamage(t *testing.T) {
	t.Parallel()
	flip := func(b []byte, at int) []byte {
		c := bytes.Clone(b)
		c[at] ^= 0x5a
		return c
	}
	rz := runnerZip(t, 300_000)
	kz := knownSizesZip(t)
	gz := gzipped(t, noisy(20_000, 5))
	dir := bytes.LastIndex(rz, []byte("PK\x01\x02")) // the last central directory header
	for name, c := range map[string]struct {
		format string
		data   []byte
		want   string
	}{
		"deflated data":          {builds.ArtifactFormatZip, flip(rz, 2000), ""},
		"stored data":            {builds.ArtifactFormatZip, flip(kz, 500), "CRC-32"},
		"crc in the descriptor":  {builds.ArtifactFormatZip, flip(rz, bytes.Index(rz, []byte("PK\x07\x08"))+5), ""},
		"central directory crc":  {builds.ArtifactFormatZip, flip(rz, dir+16), "central directory"},
		"not a zip":              {builds.ArtifactFormatZip, noisy(5000, 6), "not a zip"},
		"empty body":             {builds.ArtifactFormatZip, nil, "empty"},
		"gzip data":              {builds.ArtifactFormatGzip, flip(gz, 200), ""},
		"gzip length trailer":    {builds.ArtifactFormatGzip, flip(gz, len(gz)-2), ""},
		"zip sent as gzip":       {builds.ArtifactFormatGzip, rz, ""},
		"trailing junk in entry": {builds.ArtifactFormatZip, append(bytes.Clone(rz[:dir]), rz[dir-3:]...), ""},
	} {
		err := runCheck(c.format, c.data)
		if !isArchiveError(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ArchiveError saying %q", name, err, c.want)
		}
	}
}

// An entry stored with a data descriptor cannot be delimited in a stream (its size is only
// at the end of the archive); the check stops there and accepts what it could not see, as
// no runner writes such entries (files are deflated, directories have no data).
func TestArchiveCheckPassesOverUndelimitedEntries(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	f, err := w.CreateHeader(&zip.FileHeader{Name: "a.txt", Method: zip.Store})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("stored, size unknown up front"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := runCheck(builds.ArtifactFormatZip, buf.Bytes()); err != nil {
		t.Errorf("stored entry with a data descriptor: %v", err)
	}
}

// A check that failed early fails the upload's next write, so that the rest of a damaged
// archive is not streamed to the store.
func TestArchiveCheckFailsFast(t *testing.T) {
	t.Parallel()
	c := newArchiveCheck(builds.ArtifactFormatZip)
	junk := noisy(64<<10, 7)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write(junk)
	}
	if !isArchiveError(err) {
		t.Fatalf("writes after the archive proved damaged: %v, want an ArchiveError", err)
	}
	if cerr := c.Close(); !isArchiveError(cerr) {
		t.Errorf("close: %v, want the same verdict", cerr)
	}
	_, _ = io.Copy(io.Discard, strings.NewReader("")) // nothing left running: Close returned
}
