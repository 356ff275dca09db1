package artifacttest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// The object store goes down in the middle of an upload: jobapi answers 503 with
// Retry-After (not a 500, not a hang), the runner's artifacts-uploader tries again as it
// does for a 503, the store is back by then, and the second try stores the archive whole.
// The first try's parts leave nothing behind.
func TestObjectStoreDownDuringUpload(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	inst := start(t, jobapitest.Options{Configure: onS3(srv)})
	r := inst.NewRunner(t)
	r.MaxWait = 200 * time.Millisecond // the runner waits 1 s before its second try
	inst.CreateYAML(t, 1, "", "stages: [build, test]\na:\n  stage: build\n  script: make\n  artifacts:\n    paths: [out/]\n"+
		"b:\n  stage: test\n  script: make test\n")
	job := r.TakeNamed(t, "a")
	zip := makeZip(t, 40<<20)

	var tries atomic.Int32
	var downAt time.Time
	var answeredAt []time.Time
	content := func() (io.ReadCloser, error) {
		f, err := os.Open(zip.Path)
		if err != nil {
			return nil, err
		}
		if tries.Add(1) > 1 {
			srv.Proxy.Start() // the store is back for the retry
			return f, nil
		}
		// 20 MB into the first try, past the first multipart parts, the store goes away.
		return &onRead{ReadCloser: f, at: 20 << 20, do: func() { downAt = time.Now(); srv.Proxy.Stop() }}, nil
	}
	r.Client.HTTP.Transport = answerClock{rt: r.Client.HTTP.Transport, at: &answeredAt}
	results, err := r.UploadArtifactsRetrying(context.Background(), job, content, zipArchive)
	if err != nil {
		t.Fatal(err)
	}
	answeredAfter := answeredAt[0].Sub(downAt).Round(time.Millisecond)
	var states []string
	for _, res := range results {
		states = append(states, fmt.Sprintf("%d %v", res.Code, res.State))
	}
	if len(results) != 2 || results[0].Code != http.StatusServiceUnavailable ||
		results[0].State != runnerclient.UploadServiceUnavailable || results[1].Code != http.StatusCreated {
		t.Fatalf("tries: %v, want a 503 and then a 201", states)
	}
	if results[0].Header.Get("Retry-After") == "" {
		t.Error("the 503 has no Retry-After")
	}
	t.Logf("store cut 20 MB into a 40 MB upload: tries %v, the 503 answered %v after the cut", states, answeredAfter)

	r.Finish(t, job, runnerclient.StateSuccess, "")
	b := r.TakeNamed(t, "b")
	got, sum := download(t, r, dependency(t, b, "a"))
	wantDownload(t, "the retried upload", got, http.StatusOK, runnerclient.DownloadSucceeded)
	if sum != zip.Sum {
		t.Fatal("the archive stored by the retry differs from the one sent")
	}
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, cleanup := counts(t, inst); n != 1 || cleanup != 0 {
		t.Errorf("%d artifacts, %d objects listed for cleanup; want 1 and 0", n, cleanup)
	}
	if left := incompleteUploads(t, srv); len(left) > 0 {
		t.Errorf("unfinished multipart uploads left in the bucket: %v", left)
	}
}

// answerClock notes when each answer arrived.
type answerClock struct {
	rt http.RoundTripper
	at *[]time.Time
}

func (a answerClock) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := a.rt.RoundTrip(r)
	*a.at = append(*a.at, time.Now())
	return res, err
}

// The object store down when a dependent job downloads: 503 with Retry-After before any
// byte (the runner's downloader tries again), and the download works once it is back.
// direct_download=true, which the runner sends on its first try when
// FF_USE_DIRECT_DOWNLOAD is on, is served through jobapi like any download.
func TestObjectStoreDownDuringDownload(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	inst := start(t, jobapitest.Options{Configure: onS3(srv)})
	r := inst.NewRunner(t)
	inst.CreateYAML(t, 1, "", "stages: [build, test]\na:\n  stage: build\n  script: make\n  artifacts:\n    paths: [out/]\n"+
		"b:\n  stage: test\n  script: make test\n")
	a := r.TakeNamed(t, "a")
	zip := makeZip(t, 5<<20)
	wantUpload(t, "upload", upload(t, r, a, zip.Content(), zipArchive), http.StatusCreated, runnerclient.UploadSucceeded)
	r.Finish(t, a, runnerclient.StateSuccess, "")
	b := r.TakeNamed(t, "b")
	dep := dependency(t, b, "a")

	srv.Proxy.Stop()
	res, _ := download(t, r, dep)
	if res.Code != http.StatusServiceUnavailable || res.State != runnerclient.DownloadFailed || res.Header.Get("Retry-After") == "" {
		t.Fatalf("download with the store down: %d %v Retry-After %q, want 503 (retried) with Retry-After",
			res.Code, res.State, res.Header.Get("Retry-After"))
	}
	srv.Proxy.Start()
	direct := true
	h := sha256.New()
	got, err := r.DownloadArtifacts(context.Background(), dep, h, &direct)
	if err != nil || got.State != runnerclient.DownloadSucceeded || !bytes.Equal(h.Sum(nil), zip.Sum[:]) {
		t.Fatalf("download with direct_download=true once the store is back: %d %v %v", got.Code, got.State, err)
	}
}

// onRead calls do once, when at bytes have been read.
type onRead struct {
	io.ReadCloser
	at, read int
	do       func()
}

func (o *onRead) Read(p []byte) (int, error) {
	n, err := o.ReadCloser.Read(p)
	before := o.read
	o.read += n
	if before < o.at && o.read >= o.at {
		o.do()
	}
	return n, err
}

// incompleteUploads lists the multipart uploads the bucket holds unfinished, which S3 keeps
// (and bills) until aborted.
func incompleteUploads(t *testing.T, srv *testenv.S3Server) []string {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(srv.Endpoint, "http://"), &minio.Options{
		Creds:  credentials.NewStaticV4(srv.AccessKeyID, srv.SecretAccessKey, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for u := range c.ListIncompleteUploads(context.Background(), srv.Bucket, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		out = append(out, u.Key)
	}
	return out
}

// A replica is SIGKILLed while a runner streams an archive to it: no artifact appears, and
// what the dead replica had written (a temporary file on disk, an unfinished multipart
// upload on S3) is removed by a surviving replica's artifacts pass once the upload could no
// longer be running, and not before. The runner's retry, sent to the survivor, succeeds.
func TestReplicaKilledMidUpload(t *testing.T) {
	t.Parallel()
	bin := jobapitest.BuildJobapi(t)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			var clock atomic.Int64 // how far the survivor's clock is ahead
			now := func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }
			inst := start(t, jobapitest.Options{Now: now, Configure: then(b.configure(t),
				func(c *server.Config) { c.ArtifactUploadTimeout = 10 * time.Minute })})
			victim, logs := jobapitest.StartServe(t, bin, inst.Config, nil)
			victimURL := jobapitest.ServeURL(t, logs.String())
			r := inst.NewRunner(t)
			inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "a", "stage": "build", "script": "make"})
			job := r.TakeNamed(t, "a")
			zip := makeZip(t, 60<<20)

			// The runner uploads to the victim; 30 MB in, the victim is killed.
			toVictim := runnerclient.New(victimURL, "", "s_victim")
			t.Cleanup(toVictim.CloseIdleConnections)
			var killed sync.Once
			content := func() (io.ReadCloser, error) {
				f, err := os.Open(zip.Path)
				if err != nil {
					return nil, err
				}
				return &onRead{ReadCloser: f, at: 30 << 20, do: func() {
					killed.Do(func() {
						// The bytes read here are in flight: wait until the victim has
						// written some to its store, so the kill lands mid-write.
						time.Sleep(200 * time.Millisecond)
						if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
							t.Error(err)
						}
					})
				}}, nil
			}
			res, err := toVictim.UploadArtifacts(context.Background(), job, content, zipArchive)
			if err == nil {
				t.Fatalf("the upload to the killed replica got an answer: %d %s", res.Code, res.Message)
			}
			_ = victim.Wait()

			n, cleanup := counts(t, inst)
			if n != 0 || cleanup != 1 {
				t.Fatalf("after the kill: %d artifacts, %d uploads listed for cleanup; want 0 and 1", n, cleanup)
			}
			left := leftovers(t, inst, b.name)
			if len(left) == 0 {
				t.Fatalf("the killed upload left nothing in the store: the kill did not land mid-write")
			}
			if objs := objects(t, inst); len(objs) != 0 {
				t.Errorf("the half upload is visible as an object: %v", objs)
			}

			// A pass now must not touch it: as far as anyone knows the upload still runs.
			if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, cleanup := counts(t, inst); cleanup != 1 || len(leftovers(t, inst, b.name)) == 0 {
				t.Fatalf("a pass within the upload timeout removed the upload's object")
			}
			// Once the upload timeout (and its minute of slack) has passed, the next pass
			// removes it.
			clock.Store(int64(inst.Config.ArtifactUploadTimeout + 2*time.Minute))
			pass, err := inst.Artifacts.PassOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, cleanup := counts(t, inst); cleanup != 0 || pass.Removed != 1 {
				t.Errorf("after the pass: %d listed for cleanup, %d removed; want 0 and 1", cleanup, pass.Removed)
			}
			if left := leftovers(t, inst, b.name); len(left) > 0 {
				t.Errorf("the pass left %v", left)
			}
			t.Logf("%s: killed mid-upload, left %v; removed by the first pass past the upload timeout", b.name, left)

			wantUpload(t, "the retry to the survivor", upload(t, r, job, zip.Content(), zipArchive),
				http.StatusCreated, runnerclient.UploadSucceeded)
		})
	}
}

// leftovers lists what an interrupted upload leaves invisible in the store: temporary files
// in the directory, unfinished multipart uploads in the bucket.
func leftovers(t *testing.T, inst *jobapitest.Instance, backend string) []string {
	t.Helper()
	if backend == "s3" {
		return incompleteUploads(t, s3Of(t, inst))
	}
	root := strings.TrimPrefix(inst.Config.ObjectStore, "file://")
	var out []string
	_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.Contains(e.Name(), ".tmp-") {
			fi, _ := e.Info()
			out = append(out, fmt.Sprintf("%s (%d bytes)", e.Name(), fi.Size()))
		}
		return nil
	})
	return out
}

// s3Servers remembers each test's S3 server by the store URL its replicas were given.
var s3Servers sync.Map

func s3Of(t *testing.T, inst *jobapitest.Instance) *testenv.S3Server {
	t.Helper()
	srv, ok := s3Servers.Load(inst.Config.ObjectStore)
	if !ok {
		t.Fatalf("no S3 server for %s", inst.Config.ObjectStore)
	}
	return srv.(*testenv.S3Server)
}
