package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/jobapi/jobapi/localserver"
)

// envS3URL names an S3 server for the tests instead of a throwaway SeaweedFS:
// http://ACCESS_KEY:SECRET@host:port (https for TLS). The identity must be allowed to create
// and delete buckets: each test gets one of its own.
const envS3URL = "JOBAPI_TEST_S3_URL"

// S3Server is one test's bucket on a real S3 server: SeaweedFS (`weed server -s3`, started
// from the binary .ci/run installs), which checks every request's signature against its
// identities, stores objects on disk in volumes and multipart uploads in its filer. Nothing
// of the S3 protocol is faked.
type S3Server struct {
	// Endpoint is http://host:port of the server itself; Proxy is in front of it.
	Endpoint string
	Bucket   string
	// AccessKeyID and SecretAccessKey sign requests; the server refuses any other secret.
	AccessKeyID, SecretAccessKey string
	// Proxy is a TCP proxy to the server: Stop makes the store unreachable for whoever
	// was given URL (connections in flight are cut), Start brings it back.
	Proxy *Proxy
	// Own is the test's own server (OwnS3), which it may restart, crash or fill; nil on the
	// shared one.
	Own *localserver.SeaweedFS
}

// S3 returns a new empty bucket of this test on the shared S3 server; the bucket and every
// object in it are removed when the test ends.
func S3(t testing.TB) *S3Server {
	t.Helper()
	shared.s3Once.Do(func() {
		shared.s3, shared.s3Err = shared.resolveS3()
	})
	if shared.s3Err != nil {
		t.Fatalf("testenv: %v", shared.s3Err)
	}
	return newBucket(t, shared.s3.endpoint, shared.s3.accessKey, shared.s3.secretKey, nil)
}

// OwnS3 starts a SeaweedFS for this test alone, with one bucket, stopped and removed when
// the test ends: for tests that restart, crash or fill the store.
func OwnS3(t testing.TB) *S3Server {
	t.Helper()
	log := &Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	own, err := localserver.StartSeaweedFS(ctx, t.TempDir(), log)
	if err != nil {
		t.Fatalf("testenv: own S3 server for this test: %v", err)
	}
	t.Cleanup(func() {
		// The store is thrown away with the test: killed, not stopped. A graceful stop
		// waits for weed's volume server to drain connections of its own (about 26 s at
		// each cleanup in storefaulttest), past localserver's 30 s limit on a loaded
		// machine, which failed tests for weed's sake. An error here is only that the
		// test left it down (crashed, not started again).
		_ = own.Crash()
		if t.Failed() {
			t.Logf("testenv: log of the test's own SeaweedFS:\n%s", log)
		}
	})
	return newBucket(t, own.Endpoint, own.AccessKeyID, own.SecretAccessKey, own)
}

// sharedS3 is the S3 server of this test binary.
type sharedS3 struct {
	endpoint, accessKey, secretKey string
}

// resolveS3 finds the tests' S3 server: $JOBAPI_TEST_S3_URL (must work if set), else a
// throwaway SeaweedFS that Main stops. Unlike Postgres and Redis, no server is looked for
// at a default address: none is standard, and a stranger's store must not be written to.
func (s *servers) resolveS3() (*sharedS3, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := s.getenv(envS3URL); u != "" && s.getenv(envForceThrowaway) != "1" {
		srv, err := parseS3URL(u)
		if err != nil {
			return nil, err
		}
		c, err := s3Client(srv.endpoint, srv.accessKey, srv.secretKey)
		if err == nil {
			_, err = c.ListBuckets(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("%s=%s is set but the S3 server there does not answer its identity: %v", envS3URL, redact(u), err)
		}
		return srv, nil
	}
	sw, err := localserver.StartSeaweedFS(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("no S3 server for tests (throwaway SeaweedFS: %v); install weed or set %s", err, envS3URL)
	}
	s.seaweed = sw
	return &sharedS3{endpoint: sw.Endpoint, accessKey: sw.AccessKeyID, secretKey: sw.SecretAccessKey}, nil
}

func parseS3URL(raw string) (*sharedS3, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User == nil {
		return nil, fmt.Errorf("%s=%s: want http://ACCESS_KEY:SECRET@host:port", envS3URL, redact(raw))
	}
	secret, _ := u.User.Password()
	return &sharedS3{endpoint: u.Scheme + "://" + u.Host, accessKey: u.User.Username(), secretKey: secret}, nil
}

// s3Client is a client of the test harness itself (not of jobapi): bucket set-up and
// clean-up, and looking behind the store (unfinished multipart uploads).
func s3Client(endpoint, accessKey, secretKey string) (*minio.Client, error) {
	return minio.New(strings.TrimPrefix(strings.TrimPrefix(endpoint, "http://"), "https://"), &minio.Options{
		Creds:  credentials.NewStaticV4(accessKey, secretKey, ""),
		Secure: strings.HasPrefix(endpoint, "https://"), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
}

// newBucket makes the test's bucket on a server and the proxy in front of it.
func newBucket(t testing.TB, endpoint, accessKey, secretKey string, own *localserver.SeaweedFS) *S3Server {
	t.Helper()
	c, err := s3Client(endpoint, accessKey, secretKey)
	if err != nil {
		t.Fatal(err)
	}
	// Bucket names: 3 to 63 lower-case letters, digits and hyphens.
	bucket := randomName("jobapi-test-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("testenv: create bucket %s on %s: %v", bucket, endpoint, err)
	}
	if own == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := removeBucket(ctx, c, bucket); err != nil {
				t.Errorf("testenv: remove bucket %s: %v", bucket, err)
			}
		})
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return &S3Server{Endpoint: endpoint, Bucket: bucket, AccessKeyID: accessKey, SecretAccessKey: secretKey,
		Proxy: StartProxy(t, u.Host), Own: own}
}

// removeBucket empties bucket (objects and unfinished multipart uploads) and removes it,
// which frees its volumes on SeaweedFS.
func removeBucket(ctx context.Context, c *minio.Client, bucket string) error {
	var errs []error
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		errs = append(errs, c.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{}))
	}
	for u := range c.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err != nil {
			return u.Err
		}
		errs = append(errs, c.RemoveIncompleteUpload(ctx, bucket, u.Key))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.RemoveBucket(ctx, bucket)
}

// URL is the JOBAPI_OBJECT_STORE value for the server, through its proxy.
func (s *S3Server) URL() string {
	return fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1", s.Bucket, s.Proxy.URL(s.Endpoint))
}

// Client is an S3 client of the test's own, straight to the server (not through the proxy),
// with the bucket's identity: to look at what jobapi left in the bucket.
func (s *S3Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := s3Client(s.Endpoint, s.AccessKeyID, s.SecretAccessKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// IncompleteUploads lists the multipart uploads the bucket holds unfinished, which S3 keeps
// (and bills) until they are aborted.
func (s *S3Server) IncompleteUploads(t testing.TB) []string {
	t.Helper()
	var out []string
	for u := range s.Client(t).ListIncompleteUploads(context.Background(), s.Bucket, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		out = append(out, u.Key+" upload "+u.UploadID)
	}
	return out
}

// own is the test's own server, for the faults only it may suffer.
func (s *S3Server) own(t testing.TB, fault string) *localserver.SeaweedFS {
	t.Helper()
	if s.Own == nil {
		t.Fatalf("testenv: %s needs the test's own S3 server (testenv.OwnS3), not the shared one", fault)
	}
	return s.Own
}

// Fill makes the bucket refuse writes as SeaweedFS does once a bucket is over its quota
// (on: true), or take them again (on: false): the bucket's storage rule is marked
// read-only in the filer's configuration (/etc/seaweedfs/filer.conf), which is what the
// quota check does, and writes are answered 403 AccessDenied while reads go on.
func (s *S3Server) Fill(t testing.TB, on bool) {
	t.Helper()
	own := s.own(t, "Fill")
	cfg := fmt.Sprintf(`{"version": 0, "locations": [{"locationPrefix": "/buckets/%s/", "readOnly": %t}]}`, s.Bucket, on)
	putFilerFile(t, own.FilerURL, "/etc/seaweedfs/filer.conf", cfg)
	s.waitWrites(t, on, "AccessDenied")
}

// waitWrites waits until a write to the bucket is refused with code (refused: true) or
// succeeds (false): the gateway applies a new setting once the filer tells it.
func (s *S3Server) waitWrites(t testing.TB, refused bool, code string) {
	t.Helper()
	c := s.Client(t)
	var last error
	Eventually(t, 30*time.Second, fmt.Sprintf("writes to %s refused with %s: %v", s.Bucket, code, refused), func() bool {
		_, last = c.PutObject(context.Background(), s.Bucket, "testenv-probe", bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{})
		if refused {
			return minio.ToErrorResponse(last).Code == code
		}
		return last == nil
	})
	if !refused {
		_ = c.RemoveObject(context.Background(), s.Bucket, "testenv-probe", minio.RemoveObjectOptions{})
	}
}

// putFilerFile writes a file of SeaweedFS's own settings through its filer's HTTP API.
func putFilerFile(t testing.TB, filer, path, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, filer+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: write %s in the filer: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("testenv: write %s in the filer: %d %s", path, res.StatusCode, b)
	}
}
