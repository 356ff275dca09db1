package localserver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// A throwaway SeaweedFS checks signatures: its own keys work, another secret, another key
// and an unsigned request are refused with S3's codes. Objects outlive a clean restart and
// a crash; Stop removes the directory it made.
func TestSeaweedFSChecksKeysAndKeepsObjects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	began := time.Now()
	s, err := StartSeaweedFS(ctx, "", t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	t.Logf("started in %v", time.Since(began).Round(time.Millisecond))

	c := seaweedClient(t, s, s.AccessKeyID, s.SecretAccessKey)
	if err := c.MakeBucket(ctx, "bucket", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("jobapi"), 100_000)
	if _, err := c.PutObject(ctx, "bucket", "k", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, refused := range []struct{ name, key, secret, code string }{
		{"wrong secret", s.AccessKeyID, s.SecretAccessKey + "x", "SignatureDoesNotMatch"},
		{"unknown key", "someone-else", s.SecretAccessKey, "InvalidAccessKeyId"},
	} {
		other := seaweedClient(t, s, refused.key, refused.secret)
		_, err := other.PutObject(ctx, "bucket", "intruder", strings.NewReader("x"), 1, minio.PutObjectOptions{})
		if got := minio.ToErrorResponse(err); got.Code != refused.code || got.StatusCode != http.StatusForbidden {
			t.Errorf("%s: put answered %d %q (%v), want 403 %s", refused.name, got.StatusCode, got.Code, err, refused.code)
		}
		if _, err := other.StatObject(ctx, "bucket", "k", minio.StatObjectOptions{}); err == nil {
			t.Errorf("%s: stat of an object succeeded", refused.name)
		}
	}
	res, err := http.Get(s.Endpoint + "/b/k")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("an unsigned GET answered %d, want 403", res.StatusCode)
	}
	if _, err := c.StatObject(ctx, "bucket", "intruder", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Errorf("a refused put left an object: %v", err)
	}

	began = time.Now()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(began).Round(time.Millisecond))
	wantObject(t, c, body)

	if err := s.Crash(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatObject(ctx, "bucket", "k", minio.StatObjectOptions{}); err == nil {
		t.Error("the store answers while crashed")
	}
	began = time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("started after a crash in %v", time.Since(began).Round(time.Millisecond))
	wantObject(t, c, body)

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s behind (stat: %v)", s.Dir, err)
	}
}

func seaweedClient(t *testing.T, s *SeaweedFS, key, secret string) *minio.Client {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(key, secret, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantObject(t *testing.T, c *minio.Client, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := c.GetObject(ctx, "bucket", "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	got, err := io.ReadAll(o)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("object read back: %d bytes, %v; want the %d stored", len(got), err, len(body))
	}
}
