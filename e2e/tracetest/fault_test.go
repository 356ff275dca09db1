package tracetest_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

// TestStoreOutageAtFinish: the object store is unreachable when a job finishes. The archive
// fails, is counted and deferred with a backoff; the live log stays whole and is what the
// trace API serves. Once the store is back and the backoff has passed, the pass archives
// the log byte for byte and drops the live chunks; what the failed attempts left in the
// store goes with the artifacts pass.
func TestStoreOutageAtFinish(t *testing.T) {
	t.Parallel()
	s3 := testenv.S3(t)
	var clock atomic.Int64
	inst := start(t, jobapitest.Options{Now: func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }}, s3)
	r := inst.NewRunner(t)
	inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "build", "stage": "build", "script": "make"})
	job := r.TakeNamed(t, "build")
	log := makeLog(2<<20+77, "outage")
	appendLog(t, r, job, log)

	s3.Proxy.Stop()
	r.Finish(t, job, runnerclient.StateSuccess, "")
	// The immediate archive fails and is deferred.
	var attempts int
	for deadline := time.Now().Add(30 * time.Second); attempts == 0; time.Sleep(50 * time.Millisecond) {
		if err := inst.Pool.QueryRow(context.Background(), `SELECT attempts FROM trace_archives WHERE build_id = $1`, job.ID).Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no failed archive attempt recorded 30 s after the finish with the store down")
		}
	}
	if n := inst.Metric(t, `jobapi_trace_archives_total{result="failed"}`); n < 1 {
		t.Errorf("jobapi_trace_archives_total{result=\"failed\"} = %v, want at least 1", n)
	}
	// The log is whole and served from Postgres meanwhile.
	if resp, b := getTrace(t, inst, 1, job.ID); resp.StatusCode != http.StatusOK || !bytes.Equal(b, log) {
		t.Fatalf("trace while the store is down: %d, %d bytes; want the whole log", resp.StatusCode, len(b))
	}
	// A pass with the store still down fails again, and loses nothing.
	clock.Store(int64(time.Hour))
	passOnce(t, inst)
	if chunks, listed := liveState(t, inst, job.ID); chunks == 0 || !listed {
		t.Fatalf("after a failed pass: %d chunks, listed %v", chunks, listed)
	}

	s3.Proxy.Start()
	passOnce(t, inst) // within the backoff of the last failure: nothing due yet
	if chunks, _ := liveState(t, inst, job.ID); chunks == 0 {
		t.Fatal("a pass archived within the backoff")
	}
	clock.Store(int64(2 * time.Hour))
	passOnce(t, inst)
	wantArchived(t, inst, 1, job.ID, log)
	if n := inst.Metric(t, `jobapi_trace_archived_bytes_total`); n != float64(len(log)) {
		t.Errorf("jobapi_trace_archived_bytes_total = %v, want %d", n, len(log))
	}

	// Whatever the failed attempts left in the bucket goes with the artifacts pass; the
	// archive stays.
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := inst.Objects.List(context.Background(), "", func(o builds.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Errorf("objects in the bucket after the artifacts pass: %v, want the one archive", keys)
	}
}

// TestReplicasArchiveConcurrently: two replicas archive the same finished builds at once,
// the second with a clock far enough ahead that every claim of the first has run out in
// its eyes (the worst case of a lease that ends mid-archive). Every log is archived exactly
// once, whole; the redundant objects of the loser go with the artifacts pass.
func TestReplicasArchiveConcurrently(t *testing.T) {
	t.Parallel()
	a := start(t, jobapitest.Options{}, nil)
	b := a.Replica(t, jobapitest.Options{Now: func() time.Time { return time.Now().Add(joblogs.ArchiveLease + time.Minute) }})
	r := a.NewRunner(t)
	const n = 24
	var jobs []jobapitest.Job
	for i := range n {
		jobs = append(jobs, jobapitest.Job{"name": "j" + string(rune('a'+i)), "stage": "build", "script": "make"})
	}
	a.CreatePipeline(t, 1, []string{"build"}, jobs...)
	logs := map[int64][]byte{}
	var taken []*runnerclient.Job
	for range n {
		job := r.Take(t)
		logs[job.ID] = makeLog(64<<10+int(job.ID), job.JobInfo.Name)
		appendLog(t, r, job, logs[job.ID])
		taken = append(taken, job)
	}
	// The runner finishes them on replica a (whose worker archives at once) while both
	// replicas run passes.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, inst := range []*jobapitest.Instance{a, b, b} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := inst.Traces.PassOnce(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for _, job := range taken {
		r.Finish(t, job, runnerclient.StateSuccess, "")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var left int
		if err := a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM trace_archives`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d builds still listed after 60 s", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for id, log := range logs {
		wantArchived(t, a, 1, id, log)
	}
	var archives int
	if err := a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM job_artifacts WHERE file_type = 'trace'`).Scan(&archives); err != nil {
		t.Fatal(err)
	}
	if archives != n {
		t.Errorf("%d trace artifacts, want %d", archives, n)
	}
	if _, err := b.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var objects int
	if err := a.Objects.List(context.Background(), "", func(builds.ObjectInfo) error { objects++; return nil }); err != nil {
		t.Fatal(err)
	}
	if objects != n {
		t.Errorf("%d objects in the store after the artifacts pass, want the %d archives", objects, n)
	}
}
