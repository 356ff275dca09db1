package storefaulttest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

// TestStoreRestartedMidArchive: a job with a 24 MB log finishes and the replica streams its
// log into the store (a multipart upload, every answer of the store slowed to 300 ms so
// that the archive takes seconds); once the upload is under way in the store, the store
// restarts. The archive fails and is deferred; the live log is not dropped and the trace
// API serves it whole meanwhile; a pass once the store is back and the backoff has run
// archives it byte for byte and only then drops the live chunks. What the failed attempt
// left in the bucket goes with the artifacts pass.
func TestStoreRestartedMidArchive(t *testing.T) {
	t.Parallel()
	srv := testenv.OwnS3(t)
	var clock atomic.Int64
	inst := start(t, srv, srv.Proxy.URL(srv.Endpoint), jobapitest.Options{
		Now: func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }})
	r := inst.NewRunner(t)
	inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "build", "stage": "build", "script": "make"})
	job := r.TakeNamed(t, "build")
	log := makeLog(24<<20+123, "archive")
	for off := 0; off < len(log); {
		n := min(len(log)-off, 1<<20)
		if res := r.Patch(t, job, off, string(log[off:off+n])); res.Code != http.StatusAccepted {
			t.Fatalf("PATCH trace at %d: %d", off, res.Code)
		}
		off += n
	}

	srv.Proxy.SetLatency(300 * time.Millisecond)
	restarted := make(chan time.Duration, 1)
	go func() {
		// The restart comes once the archive's multipart upload exists in the store: its
		// first part is on its way or stored, the rest is not.
		deadline := time.Now().Add(time.Minute)
		for len(srv.IncompleteUploads(t)) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Error("no multipart upload of the archive within a minute of the finish")
		}
		restarted <- restart(t, srv, time.Second, nil)
	}()
	r.Finish(t, job, runnerclient.StateSuccess, "")
	downFor := <-restarted
	srv.Proxy.SetLatency(0)

	// The immediate archive failed and is deferred; nothing was dropped.
	var attempts int
	testenv.Eventually(t, 30*time.Second, "a failed archive attempt recorded", func() bool {
		if err := inst.Pool.QueryRow(context.Background(),
			`SELECT coalesce((SELECT attempts FROM trace_archives WHERE build_id = $1), -1)`, job.ID).Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		return attempts != 0
	})
	t.Logf("store restarted mid-archive (no answer for %v): archive attempts %d", downFor.Round(time.Millisecond), attempts)
	if attempts < 0 {
		t.Fatal("the archive was committed across the restart: the restart did not land mid-archive")
	}
	if chunks := liveChunks(t, inst, job.ID); chunks == 0 {
		t.Fatal("the live log was dropped after a failed archive")
	}
	if resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", job.ID), nil); resp.StatusCode != http.StatusOK || !bytes.Equal(b, log) {
		t.Fatalf("trace after the failed archive: %d, %d bytes; want the whole %d-byte log", resp.StatusCode, len(b), len(log))
	}

	clock.Store(int64(time.Hour)) // past the failure's backoff
	if _, err := inst.Traces.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var d api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d", job.ID), nil, &d)
	var trace *api.JobArtifact
	for _, a := range d.Artifacts {
		if a.FileType == "trace" {
			trace = &a
		}
	}
	if trace == nil || trace.Size != int64(len(log)) {
		t.Fatalf("trace artifact after the pass: %+v, want %d bytes", trace, len(log))
	}
	if resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", job.ID), nil); resp.StatusCode != http.StatusOK ||
		!bytes.Equal(b, log) || resp.Header.Get("ETag") == "" {
		t.Fatalf("archived trace: %d, %d bytes, ETag %q; want the whole log from the archive", resp.StatusCode, len(b), resp.Header.Get("ETag"))
	}
	if chunks := liveChunks(t, inst, job.ID); chunks != 0 {
		t.Errorf("%d live chunks left after the archive", chunks)
	}

	clock.Store(int64(3 * time.Hour))
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if keys := objectKeys(t, srv); len(keys) != 1 {
		t.Errorf("objects in the bucket after the artifacts pass: %v, want the one archive", keys)
	}
	if left := srv.IncompleteUploads(t); len(left) > 0 {
		t.Errorf("unfinished multipart uploads left in the bucket: %v", left)
	}
}

// liveChunks counts a build's log chunks in Postgres.
func liveChunks(t *testing.T, inst *jobapitest.Instance, id int64) int {
	t.Helper()
	return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM build_trace_chunks WHERE build_id = $1", id)
}

// makeLog is n bytes of log lines.
func makeLog(n int, seed string) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s line %d \x1b[32mok\x1b[0m %s\n", seed, i, strings.Repeat("x", i%97))
	}
	return b.Bytes()[:n]
}
