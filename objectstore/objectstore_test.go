package objectstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/testenv"
)

// backend is one store under test, with a way to look behind it for leftovers.
type backend struct {
	store builds.ObjectStore
	// leftovers lists what a failed or interrupted Put left behind that no reader sees:
	// temporary files, unfinished multipart uploads.
	leftovers func(t *testing.T) []string
	// interrupted leaves, under key, what a process killed mid-Put would.
	interrupted func(t *testing.T, key string)
	// down makes the store unreachable until the returned func restores it (nil: the
	// backend cannot be cut off).
	down func(t *testing.T) (restore func())
}

// testPartSize is small so that a few MB already make S3 multipart uploads of many parts.
const testPartSize = 5 << 20

func dirBackend(t *testing.T) backend {
	root := t.TempDir()
	d, err := objectstore.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	return backend{
		store: d,
		leftovers: func(t *testing.T) []string {
			var out []string
			_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
				if err == nil && !e.IsDir() && strings.Contains(e.Name(), ".tmp-") {
					out = append(out, p)
				}
				return nil
			})
			return out
		},
		interrupted: func(t *testing.T, key string) {
			p := filepath.Join(root, filepath.FromSlash(key)) + ".tmp-123456"
			if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("half an object"), 0o640); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func s3Backend(t *testing.T) backend {
	srv := testenv.S3(t)
	return s3BackendOn(t, srv)
}

// s3BackendOn is a backend on srv's bucket, through its proxy.
func s3BackendOn(t *testing.T, srv *testenv.S3Server) backend {
	u := strings.TrimPrefix(srv.Proxy.URL(srv.Endpoint), "http://")
	s, err := objectstore.OpenS3(context.Background(), objectstore.S3Options{Bucket: srv.Bucket, Endpoint: u,
		Region: "us-east-1", PathStyle: true, PartSize: testPartSize,
		Credentials: objectstore.Credentials{AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey}})
	if err != nil {
		t.Fatal(err)
	}
	// A client of the test's own looks at multipart uploads, which the store hides.
	core := minio.Core{Client: srv.Client(t)}
	return backend{
		store:     s,
		leftovers: func(t *testing.T) []string { return srv.IncompleteUploads(t) },
		interrupted: func(t *testing.T, key string) {
			ctx := context.Background()
			id, err := core.NewMultipartUpload(ctx, srv.Bucket, key, minio.PutObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			part := bytes.Repeat([]byte("p"), testPartSize)
			if _, err := core.PutObjectPart(ctx, srv.Bucket, key, id, 1, bytes.NewReader(part), int64(len(part)),
				minio.PutObjectPartOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		down: func(t *testing.T) func() {
			srv.Proxy.Stop()
			return srv.Proxy.Start
		},
	}
}

func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for name, open := range map[string]func(*testing.T) backend{"dir": dirBackend, "s3": s3Backend} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t *testing.T, s builds.ObjectStore, key string, off, n int64) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("open %s [%d,+%d): %v", key, off, n, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		// Three and a bit parts on S3.
		data := randomBytes(t, 3*testPartSize+12345)
		n, err := b.store.Put(ctx, "artifacts/1/2/archive-abc", bytes.NewReader(data))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("put: %d bytes, %v; want %d", n, err, len(data))
		}
		if got := readAll(t, b.store, "artifacts/1/2/archive-abc", 0, -1); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, differing from the %d written", len(got), len(data))
		}
		for _, r := range []struct{ off, n int64 }{{0, 10}, {7, 100}, {int64(len(data)) - 5, -1}, {testPartSize - 3, 6}, {42, 0}} {
			end := int64(len(data))
			if r.n >= 0 {
				end = r.off + r.n
			}
			if got := readAll(t, b.store, "artifacts/1/2/archive-abc", r.off, r.n); !bytes.Equal(got, data[r.off:end]) {
				t.Errorf("range [%d,+%d): got %d bytes, not the stored ones", r.off, r.n, len(got))
			}
		}
		info, err := b.store.Stat(ctx, "artifacts/1/2/archive-abc")
		if err != nil || info.Size != int64(len(data)) || info.Modified.IsZero() {
			t.Fatalf("stat: %+v, %v", info, err)
		}
		if _, err := b.store.Put(ctx, "artifacts/1/3/junit-def", strings.NewReader("<testsuite/>")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Put(ctx, "other/x", strings.NewReader("")); err != nil {
			t.Fatal(err)
		}
		var listed []string
		if err := b.store.List(ctx, "artifacts/", func(o builds.ObjectInfo) error {
			listed = append(listed, fmt.Sprintf("%s:%d", o.Key, o.Size))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("artifacts/1/2/archive-abc:%d artifacts/1/3/junit-def:12", len(data))
		if got := strings.Join(listed, " "); got != want {
			t.Errorf("list artifacts/: %q, want %q", got, want)
		}
		if got := readAll(t, b.store, "other/x", 0, -1); len(got) != 0 {
			t.Errorf("empty object read back as %d bytes", len(got))
		}

		if err := b.store.Delete(ctx, "artifacts/1/2/archive-abc"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Stat(ctx, "artifacts/1/2/archive-abc"); !errors.Is(err, builds.ErrNotFound) {
			t.Errorf("stat after delete: %v, want ErrNotFound", err)
		}
		if _, err := b.store.Open(ctx, "artifacts/1/2/archive-abc", 0, -1); !errors.Is(err, builds.ErrNotFound) {
			t.Errorf("open after delete: %v, want ErrNotFound", err)
		}
		if err := b.store.Delete(ctx, "artifacts/1/2/archive-abc"); err != nil {
			t.Errorf("deleting a missing key: %v, want no error", err)
		}
		if err := b.store.Ping(ctx); err != nil {
			t.Errorf("ping: %v", err)
		}
	})
}

// errCut is what a request body cut off mid-stream returns.
var errCut = fmt.Errorf("client went away: %w", io.ErrUnexpectedEOF)

// A Put whose reader fails, is cut off (net/http's io.ErrUnexpectedEOF, which minio-go
// would take for the last part), or whose context ends, leaves nothing: no object, no
// temporary file, no unfinished upload; and it returns the reader's error, not a store one.
func TestFailedPutLeavesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		data := randomBytes(t, 2*testPartSize+100)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cases := []struct {
			name string
			r    io.Reader
			ctx  context.Context
			want error
		}{
			{"error mid-stream", io.MultiReader(bytes.NewReader(data), iotest.ErrReader(errCut)), context.Background(), errCut},
			{"bare unexpected EOF", io.MultiReader(bytes.NewReader(data[:testPartSize+10]), iotest.ErrReader(io.ErrUnexpectedEOF)),
				context.Background(), io.ErrUnexpectedEOF},
			{"error in the first part", io.MultiReader(bytes.NewReader(data[:100]), iotest.ErrReader(errCut)), context.Background(), errCut},
			{"context canceled", &cancelAfter{r: bytes.NewReader(data), n: testPartSize + 1, cancel: cancel}, ctx, context.Canceled},
		}
		for i, c := range cases {
			key := fmt.Sprintf("artifacts/9/%d/archive", i)
			_, err := b.store.Put(c.ctx, key, c.r)
			if !errors.Is(err, c.want) || errors.Is(err, builds.ErrUnavailable) {
				t.Errorf("%s: put returned %v, want %v and not ErrUnavailable", c.name, err, c.want)
			}
			if _, err := b.store.Stat(context.Background(), key); !errors.Is(err, builds.ErrNotFound) {
				t.Errorf("%s: stat after the failed put: %v, want ErrNotFound", c.name, err)
			}
		}
		if left := b.leftovers(t); len(left) > 0 {
			t.Errorf("failed puts left %v", left)
		}
	})
}

// cancelAfter cancels its context once n bytes were read, as a replica shutting down would.
type cancelAfter struct {
	r      io.Reader
	n      int
	read   int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	if c.read >= c.n {
		c.cancel()
	}
	return n, err
}

// What a killed process leaves under a key (a temporary file, an unfinished multipart
// upload) is invisible to readers and removed by Delete of the key.
func TestDeleteRemovesInterruptedPut(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		b.interrupted(t, "artifacts/5/6/archive-x")
		if _, err := b.store.Stat(ctx, "artifacts/5/6/archive-x"); !errors.Is(err, builds.ErrNotFound) {
			t.Errorf("an interrupted put is visible: %v", err)
		}
		n := 0
		_ = b.store.List(ctx, "", func(builds.ObjectInfo) error { n++; return nil })
		if n != 0 {
			t.Errorf("list shows %d objects after an interrupted put, want none", n)
		}
		if len(b.leftovers(t)) != 1 {
			t.Fatalf("leftovers before delete: %v, want one", b.leftovers(t))
		}
		if err := b.store.Delete(ctx, "artifacts/5/6/archive-x"); err != nil {
			t.Fatal(err)
		}
		if left := b.leftovers(t); len(left) > 0 {
			t.Errorf("delete left %v", left)
		}
	})
}

// An unreachable store fails every call with ErrUnavailable (a 503 for the client), and
// works again once it is back.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	b := s3Backend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.store.Put(ctx, "k/before", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	restore := b.down(t)
	if _, err := b.store.Put(ctx, "k/during", bytes.NewReader(randomBytes(t, testPartSize+1))); !errors.Is(err, builds.ErrUnavailable) {
		t.Errorf("put while down: %v, want ErrUnavailable", err)
	}
	if _, err := b.store.Open(ctx, "k/before", 0, -1); !errors.Is(err, builds.ErrUnavailable) {
		t.Errorf("open while down: %v, want ErrUnavailable", err)
	}
	if err := b.store.Ping(ctx); !errors.Is(err, builds.ErrUnavailable) {
		t.Errorf("ping while down: %v, want ErrUnavailable", err)
	}
	restore()
	if got := readAll(t, b.store, "k/before", 0, -1); string(got) != "x" {
		t.Errorf("after the store came back: read %q", got)
	}
}

// The store cut off in the middle of a multipart upload: the Put fails as unavailable and
// nothing is visible; a later Put of the same key succeeds.
func TestStoreCutMidUpload(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	s, err := objectstore.Open(context.Background(), srv.URL(), objectstore.Credentials{AccessKeyID: srv.AccessKeyID,
		SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(t, 2*objectstore.DefaultPartSize+10)
	cut := &onRead{r: bytes.NewReader(data), at: objectstore.DefaultPartSize + 1, do: srv.Proxy.Stop}
	if _, err := s.Put(context.Background(), "k/cut", cut); !errors.Is(err, builds.ErrUnavailable) {
		t.Fatalf("put cut mid-upload: %v, want ErrUnavailable", err)
	}
	srv.Proxy.Start()
	if _, err := s.Stat(context.Background(), "k/cut"); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("stat after the cut: %v, want ErrNotFound", err)
	}
	if _, err := s.Put(context.Background(), "k/cut", bytes.NewReader(data)); err != nil {
		t.Fatalf("put again: %v", err)
	}
	if got := readAll(t, s, "k/cut", 0, -1); !bytes.Equal(got, data) {
		t.Error("the second put's object differs")
	}
}

// onRead calls do once at bytes read.
type onRead struct {
	r    io.Reader
	at   int
	read int
	do   func()
}

func (o *onRead) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	before := o.read
	o.read += n
	if before < o.at && o.read >= o.at {
		o.do()
	}
	return n, err
}

func TestKeysAreChecked(t *testing.T) {
	t.Parallel()
	d, err := objectstore.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", "/abs", "a/../../etc/passwd", "a//b", "a/./b", "a/", "x.tmp-1", `a\b`, ".."} {
		if _, err := d.Put(context.Background(), key, strings.NewReader("x")); err == nil {
			t.Errorf("put %q: accepted", key)
		}
	}
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := objectstore.Open(context.Background(), "file://"+dir+"/objects", objectstore.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), "a/b", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "objects", "a", "b")); err != nil || string(b) != "hello" {
		t.Errorf("file store wrote %q, %v", b, err)
	}
	for _, bad := range []string{
		"ftp://x", "file://remotehost/x", "file://relative", "s3://", "s3://bucket/prefix",
		"s3://bucket?endpoint=ftp://x", "s3://bucket?bogus=1", "s3://bucket?use_path_style=maybe",
		"s3://key:secret@bucket",
	} {
		if _, err := objectstore.Open(context.Background(), bad, objectstore.Credentials{}); err == nil {
			t.Errorf("%q: accepted", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error shows the secret: %v", bad, err)
		}
	}
}
