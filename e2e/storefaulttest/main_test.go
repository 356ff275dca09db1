// Package storefaulttest_test checks what jobapi does when its real object store (a
// SeaweedFS of the test's own, testenv.OwnS3) restarts in the middle of a transfer: a
// runner's artifact upload, a dependency or operator download, a trace archive pass and the
// read of a dynamic child pipeline's configuration; and when the store refuses (throttling
// answered 503 SlowDown by a fault injector in front of it, a bucket over its quota). Each
// must end with nothing lost that a runner was told is stored, and every failure must be a
// 503 the runner retries or an error the operator sees. Real replicas over HTTP on real
// Postgres and Redis; "mid-transfer" is made real by a runner whose body stops until the
// store is down, a reader that stops reading, or a proxy that slows every answer.
package storefaulttest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// start is a replica whose object store is at endpoint (http://host:port: the server
// itself, its proxy or a fault injector), with a small Postgres pool (the machine's
// Postgres is shared by every suite) and its own clock offset.
func start(t *testing.T, srv *testenv.S3Server, endpoint string, o jobapitest.Options) *jobapitest.Instance {
	t.Helper()
	configure := o.Configure
	o.Configure = func(c *server.Config) {
		c.DatabaseMaxConns = 4
		c.ObjectStore = fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1", srv.Bucket, endpoint)
		c.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey}
		if configure != nil {
			configure(c)
		}
	}
	return jobapitest.Start(t, o)
}

// restart stops the test's own store, keeps it down for down, and starts it again on the
// same ports with its data; it returns how long the store answered nothing.
func restart(t *testing.T, srv *testenv.S3Server, down time.Duration, whileDown func()) time.Duration {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wasDown := false
	err := srv.Own.RestartAfter(ctx, func() {
		wasDown = true
		if whileDown != nil {
			whileDown()
		}
		time.Sleep(down)
	})
	if !wasDown && whileDown != nil {
		whileDown() // a caller waiting for the store to be down must not wait for ever
	}
	if err != nil {
		t.Error(err) // not Fatal: tests restart the store from goroutines of their own
	}
	return time.Since(began)
}

// crashRestart kills the test's own store (SIGKILL: every connection cut at once, no
// request finished, as a crash of the store's host), keeps it down for down and starts it
// again with its data; it returns how long the store answered nothing. A graceful stop
// would wait for the requests in flight, which a stalled reader holds open.
func crashRestart(t *testing.T, srv *testenv.S3Server, down time.Duration) time.Duration {
	t.Helper()
	return crashRestartWhile(t, srv, down, nil)
}

// crashRestartWhile is crashRestart calling whileDown once the store is killed (or failed
// to be). A failure is t.Error, not Fatal: tests crash the store from goroutines of their
// own, and one waiting in whileDown must not wait for ever.
func crashRestartWhile(t *testing.T, srv *testenv.S3Server, down time.Duration, whileDown func()) time.Duration {
	t.Helper()
	began := time.Now()
	err := srv.Own.Crash()
	if whileDown != nil {
		whileDown()
	}
	if err == nil {
		time.Sleep(down)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = srv.Own.Start(ctx)
		cancel()
	}
	if err != nil {
		t.Error(err)
	}
	return time.Since(began)
}

var zipArchive = runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip,
	Type: runnerclient.ArtifactTypeArchive}

// onRead calls do once, when at bytes have been read, before the read returns: the
// reader's client sends nothing more until do returns.
type onRead struct {
	io.ReadCloser
	at, read int64
	do       func()
}

func (o *onRead) Read(p []byte) (int, error) {
	n, err := o.ReadCloser.Read(p)
	before := o.read
	o.read += int64(n)
	if before < o.at && o.read >= o.at {
		o.do()
	}
	return n, err
}

// uploadResults is what each try of a retrying upload was answered, for messages.
func uploadResults(res []runnerclient.UploadResult) string {
	var b bytes.Buffer
	for i, r := range res {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %v", r.Code, r.State)
		if r.Code == http.StatusServiceUnavailable {
			fmt.Fprintf(&b, " (Retry-After %q)", r.Header.Get("Retry-After"))
		}
	}
	return b.String()
}

// artifactRows counts the job's artifact rows of a type and the objects listed for cleanup.
func artifactRows(t *testing.T, inst *jobapitest.Instance, jobID int64, fileType string) (rows, cleanup int) {
	t.Helper()
	return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM job_artifacts WHERE build_id = $1 AND file_type = $2", jobID, fileType),
		jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM object_cleanup")
}

// storedObject reads an object straight from the store (not through jobapi) and returns
// its SHA-256: what a runner was told is stored must be there, whole.
func storedObject(t *testing.T, srv *testenv.S3Server, key string) [32]byte {
	t.Helper()
	obj, err := srv.Client(t).GetObject(context.Background(), srv.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		t.Fatalf("read %s from the store: %v", key, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// objectKeys lists every complete object in the bucket.
func objectKeys(t *testing.T, srv *testenv.S3Server) []string {
	t.Helper()
	var keys []string
	for o := range srv.Client(t).ListObjects(context.Background(), srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// crashAndStart kills the store (SIGKILL: no clean shutdown) and starts it again.
func crashAndStart(t *testing.T, srv *testenv.S3Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Own.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Own.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// hashWriter is a SHA-256 that a download streams into.
type hashWriter struct{ h hash.Hash }

func newHash() *hashWriter { return &hashWriter{sha256.New()} }

func (w *hashWriter) Write(p []byte) (int, error) { return w.h.Write(p) }

func (w *hashWriter) sum() [32]byte {
	var s [32]byte
	copy(s[:], w.h.Sum(nil))
	return s
}

// operatorGet is a GET of path as the operator, for a test that reads the body itself.
func operatorGet(t *testing.T, inst *jobapitest.Instance, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, inst.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("PRIVATE-TOKEN", jobapitest.AdminToken)
	return req
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
