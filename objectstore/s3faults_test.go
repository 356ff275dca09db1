package objectstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/testenv"
)

// The S3 server checks the keys: a store opened with another secret, or an unknown access
// key, is refused by the server itself (SignatureDoesNotMatch, InvalidAccessKeyId), which
// every call reports as the store failing (a 503 for the runner) with S3's reason for the
// operator, and leaves nothing in the bucket.
func TestS3RefusesWrongKeys(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	ctx := context.Background()
	for _, c := range []struct{ name, key, secret, code string }{
		{"wrong secret", srv.AccessKeyID, srv.SecretAccessKey + "x", "SignatureDoesNotMatch"},
		{"unknown key", "not-" + srv.AccessKeyID, srv.SecretAccessKey, "InvalidAccessKeyId"},
	} {
		s, err := objectstore.Open(ctx, srv.URL(), objectstore.Credentials{AccessKeyID: c.key, SecretAccessKey: c.secret})
		if err != nil {
			t.Fatal(err)
		}
		for op, err := range map[string]error{
			"ping": s.Ping(ctx),
			"put":  func() error { _, err := s.Put(ctx, "k/"+c.name, strings.NewReader("x")); return err }(),
			"stat": func() error { _, err := s.Stat(ctx, "k/"+c.name); return err }(),
		} {
			// A HEAD's answer has no body: only the put names S3's reason.
			var answer minio.ErrorResponse
			if !errors.Is(err, builds.ErrUnavailable) || !errors.As(err, &answer) || answer.StatusCode != 403 ||
				op == "put" && answer.Code != c.code {
				t.Errorf("%s: %s = %v; want ErrUnavailable, 403 %s", c.name, op, err, c.code)
			}
		}
		if _, err := srv.Client(t).StatObject(ctx, srv.Bucket, "k/"+c.name, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
			t.Errorf("%s: the refused put left an object: %v", c.name, err)
		}
	}
	// The right keys work on the same bucket.
	s, err := objectstore.Open(ctx, srv.URL(), objectstore.Credentials{AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("ping with the right keys: %v", err)
	}
}

// The store refusing writes, as SeaweedFS does for a bucket over its quota (403 AccessDenied
// for a single PUT, 500 for a multipart upload's parts): every Put fails as the store failing,
// leaves no object and no unfinished upload, reads go on, and writes work once it takes
// them again. The store restarting (a crash) keeps every object a Put said it stored.
func TestS3RefusingAndRestartingStore(t *testing.T) {
	t.Parallel()
	srv := testenv.OwnS3(t)
	b := s3BackendOn(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stored := randomBytes(t, 2*testPartSize+7)
	if _, err := b.store.Put(ctx, "k/stored", bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	for _, fault := range []struct {
		name string
		set  func(t testing.TB, on bool)
	}{{"full", srv.Fill}} {
		fault.set(t, true)
		for name, size := range map[string]int{"small": 100, "multipart": 2*testPartSize + 1} {
			key := "k/" + fault.name + "-" + name
			began := time.Now()
			_, err := b.store.Put(ctx, key, bytes.NewReader(randomBytes(t, size)))
			if !errors.Is(err, builds.ErrUnavailable) {
				t.Errorf("%s: put %s: %v, want ErrUnavailable", fault.name, name, err)
			}
			t.Logf("%s: a %s put failed after %v: %v", fault.name, name, time.Since(began).Round(time.Millisecond), err)
			if _, err := b.store.Stat(ctx, key); !errors.Is(err, builds.ErrNotFound) {
				t.Errorf("%s: stat of the refused %s put: %v, want ErrNotFound", fault.name, name, err)
			}
		}
		if got := readAll(t, b.store, "k/stored", 0, -1); !bytes.Equal(got, stored) {
			t.Errorf("%s: a read of a stored object differs", fault.name)
		}
		fault.set(t, false)
		if _, err := b.store.Put(ctx, "k/after-"+fault.name, strings.NewReader("x")); err != nil {
			t.Errorf("put once the store takes writes again: %v", err)
		}
	}
	if left := b.leftovers(t); len(left) > 0 {
		t.Errorf("refused puts left unfinished uploads: %v", left)
	}

	if err := srv.Own.Crash(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Open(ctx, "k/stored", 0, -1); !errors.Is(err, builds.ErrUnavailable) {
		t.Errorf("open with the store down: %v, want ErrUnavailable", err)
	}
	if err := srv.Own.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b.store, "k/stored", 0, -1); !bytes.Equal(got, stored) {
		t.Error("an object stored before the crash differs after it")
	}
}

// A read whose stream is cut mid-object (the proxy in front of the store cut and restored,
// as a restart of the store does) picks the object up where it stopped: the reader sees
// every byte once, in order, and no error. The same cut without the resume (ResumeWithin
// < 0) breaks the read, so the cut does land mid-stream. A store that stays away past
// ResumeWithin, or an object replaced meanwhile, ends the read with an error instead of
// bytes of another version joined to the first's.
func TestS3ReadResumesAfterACut(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	ctx := context.Background()
	open := func(resume time.Duration) *objectstore.S3 {
		s, err := objectstore.OpenS3(ctx, objectstore.S3Options{Bucket: srv.Bucket,
			Endpoint: strings.TrimPrefix(srv.Proxy.URL(srv.Endpoint), "http://"), Region: "us-east-1", PathStyle: true,
			ResumeWithin: resume,
			Credentials:  objectstore.Credentials{AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(0)
	data := randomBytes(t, 24<<20)
	if _, err := s.Put(ctx, "k/big", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	// cutAfter reads 1 MB of [off, off+n), cuts the store off for away (and does between),
	// reads the rest, and returns once the store is reachable again.
	cutAfter := func(s *objectstore.S3, off, n int64, away time.Duration, between func()) ([]byte, time.Duration, error) {
		rc, err := s.Open(ctx, "k/big", off, n)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		head := make([]byte, 1<<20)
		if _, err := io.ReadFull(rc, head); err != nil {
			t.Fatal(err)
		}
		srv.Proxy.Stop()
		began := time.Now()
		if between != nil {
			between()
		}
		back := make(chan struct{})
		go func() {
			defer close(back)
			time.Sleep(away)
			srv.Proxy.Start()
		}()
		rest, err := io.ReadAll(rc)
		took := time.Since(began)
		<-back
		return append(head, rest...), took, err
	}

	if got, _, err := cutAfter(open(-1), 0, -1, 200*time.Millisecond, nil); !errors.Is(err, builds.ErrUnavailable) {
		t.Fatalf("the cut without the resume: %d bytes, %v; want ErrUnavailable (the cut missed the stream)", len(got), err)
	}
	for _, c := range []struct {
		name   string
		off, n int64
	}{{"whole", 0, -1}, {"from an offset", 3 << 20, -1}, {"a range", 2 << 20, 9 << 20}} {
		got, took, err := cutAfter(s, c.off, c.n, 500*time.Millisecond, nil)
		want := data[c.off:]
		if c.n > 0 {
			want = want[:c.n]
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: read across a cut: %d bytes (want %d), equal %v, %v", c.name, len(got), len(want), bytes.Equal(got, want), err)
		}
		t.Logf("%s: the rest read across a 500 ms cut in %v", c.name, took.Round(time.Millisecond))
	}

	if _, _, err := cutAfter(open(time.Second), 0, -1, 3*time.Second, nil); !errors.Is(err, builds.ErrUnavailable) {
		t.Errorf("read with the store away past ResumeWithin: %v, want ErrUnavailable", err)
	}

	other := randomBytes(t, len(data))
	_, _, err := cutAfter(s, 0, -1, 200*time.Millisecond, func() {
		if _, err := srv.Client(t).PutObject(ctx, srv.Bucket, "k/big", bytes.NewReader(other), int64(len(other)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if err == nil {
		t.Error("a read across a cut joined the bytes of the object that replaced it")
	}
	t.Logf("a read across a cut, the object replaced meanwhile: %v", err)
}
