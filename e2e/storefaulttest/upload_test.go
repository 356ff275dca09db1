package storefaulttest_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// TestStoreRestartedMidUpload: the store restarts while a runner streams a 40 MB archive,
// 20 MB in (past the first multipart part): the runner's body stops until the store is
// down, so the rest reaches a replica whose store is gone. Every failed try is a 503 with
// Retry-After, which gitlab-runner's artifacts-uploader retries (six tries, 1 s doubling to
// 5 s: the real schedule); a try once the store is back gets the 201. What the 201 named
// is in the store, whole, and still there after the store is killed (SIGKILL) and started
// again; the dependent job downloads it; the failed tries leave no artifact, and what they
// left in the bucket goes with the artifacts pass.
func TestStoreRestartedMidUpload(t *testing.T) {
	t.Parallel()
	srv := testenv.OwnS3(t)
	var clock atomic.Int64
	inst := start(t, srv, srv.Endpoint, jobapitest.Options{
		Now:       func() time.Time { return time.Now().Add(time.Duration(clock.Load())) },
		Configure: func(c *server.Config) { c.ArtifactUploadTimeout = 10 * time.Minute },
	})
	r := inst.NewRunner(t)
	r.MaxWait = 0 // gitlab-runner's own backoff between tries
	inst.CreateYAML(t, 1, "", "stages: [build, test]\na:\n  stage: build\n  script: make\n  artifacts:\n    paths: [out/]\n"+
		"b:\n  stage: test\n  script: make test\n")
	job := r.TakeNamed(t, "a")
	zip := jobapitest.MakeZip(t, 40<<20, nil)

	var restarted sync.WaitGroup
	var downFor time.Duration
	var tries atomic.Int32
	content := func() (io.ReadCloser, error) {
		f, err := os.Open(zip.Path)
		if err != nil || tries.Add(1) > 1 {
			return f, err
		}
		return &onRead{ReadCloser: f, at: 20 << 20, do: func() {
			down := make(chan struct{})
			restarted.Add(1)
			go func() {
				defer restarted.Done()
				// Killed, not stopped: a graceful stop waits for the part upload in flight,
				// whose body this stalled read holds, until the stop's own time limit.
				downFor = crashRestartWhile(t, srv, time.Second, func() { close(down) })
			}()
			<-down // the rest of the body goes to a replica whose store is gone
		}}, nil
	}
	began := time.Now()
	results, err := r.UploadArtifactsRetrying(context.Background(), job, content, zipArchive)
	if err != nil {
		t.Fatal(err)
	}
	restarted.Wait()
	t.Logf("store restarted 20 MB into a 40 MB upload (no answer for %v): tries %s, %v in all",
		downFor.Round(time.Millisecond), uploadResults(results), time.Since(began).Round(time.Millisecond))
	last := results[len(results)-1]
	if last.Code != http.StatusCreated {
		t.Fatalf("the runner gave up: tries %s", uploadResults(results))
	}
	for _, res := range results[:len(results)-1] {
		if res.Code != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Errorf("a failed try: %d %v Retry-After %q, want 503 with Retry-After", res.Code, res.State, res.Header.Get("Retry-After"))
		}
	}
	if len(results) < 2 {
		t.Errorf("the first try, whose body reached the replica with the store down, got %d", results[0].Code)
	}

	// What the 201 named is stored, whole, and survives the store's crash.
	var key string
	if err := inst.Pool.QueryRow(context.Background(),
		`SELECT object_key FROM job_artifacts WHERE build_id = $1 AND file_type = 'archive'`, job.ID).Scan(&key); err != nil {
		t.Fatalf("no archive row after the 201: %v", err)
	}
	if storedObject(t, srv, key) != zip.Sum {
		t.Fatal("the stored archive differs from the one sent")
	}
	crashAndStart(t, srv)
	if storedObject(t, srv, key) != zip.Sum {
		t.Fatal("the archive the runner was told is stored differs after the store's crash")
	}
	r.Finish(t, job, runnerclient.StateSuccess, "")
	b := r.TakeNamed(t, "b")
	var dep runnerclient.Dependency
	for _, d := range b.Dependencies {
		if d.Name == "a" {
			dep = d
		}
	}
	h := newHash()
	res, err := r.DownloadArtifacts(context.Background(), dep, h, nil)
	if err != nil || res.State != runnerclient.DownloadSucceeded || h.sum() != zip.Sum {
		t.Fatalf("the dependent job's download: %d %v %v", res.Code, res.State, err)
	}

	// The failed tries' leftovers (multipart uploads the dead store could not abort) go
	// with the first artifacts pass past the upload timeout; the artifact stays.
	clock.Store(int64(inst.Config.ArtifactUploadTimeout + 2*time.Minute))
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows, cleanup := artifactRows(t, inst, job.ID, "archive"); rows != 1 || cleanup != 0 {
		t.Errorf("%d archive rows, %d objects listed for cleanup; want 1 and 0", rows, cleanup)
	}
	if left := srv.IncompleteUploads(t); len(left) > 0 {
		t.Errorf("unfinished multipart uploads left in the bucket: %v", left)
	}
	if keys := objectKeys(t, srv); len(keys) != 1 || keys[0] != key {
		t.Errorf("objects in the bucket: %v, want only %s", keys, key)
	}
}
