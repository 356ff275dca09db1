package pipelinetest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

func reapCounts(r builds.ReapResult) string {
	return fmt.Sprintf("no_updates=%d execution_timeout=%d stuck_pending=%d canceled=%d retried=%d",
		r.NoUpdates, r.ExecutionTimeout, r.StuckPending, r.Canceled, r.Retried)
}

// TestReapers: each reaper acts exactly past its threshold (SPEC §5 defaults), counts what
// it did, and the runner of a reaped build is told to abort. Liveness touches are throttled
// to one write per minute: a touch protects its build for the threshold minus at most that.
func TestReapers(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) {
		c.NoUpdatesTimeout = time.Hour
		c.ExecutionGrace = 15 * time.Minute
		c.PendingTimeout = 24 * time.Hour
		c.CancelingTimeout = 30 * time.Minute
	}})
	if ti := inst.Service.Config().TouchInterval; ti != time.Minute {
		t.Fatalf("touch interval %v; the timings below assume 1m", ti)
	}
	t0 := clock.Now()
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 40, "", []string{"build"},
		job{"name": "nu1", "stage": "build", "script": "x", "timeout": "3h"},
		job{"name": "nu2", "stage": "build", "script": "x", "timeout": "3h"},
		job{"name": "nu3", "stage": "build", "script": "x", "timeout": "3h"},
		job{"name": "nu4", "stage": "build", "script": "x", "retry": 1, "timeout": "3h"},
		job{"name": "ex1", "stage": "build", "script": "x", "timeout": 60},
		job{"name": "cn1", "stage": "build", "script": "x"},
		job{"name": "pe1", "stage": "build", "script": "x", "tags": []string{"nobody"}})
	j := r.TakeAll(t, 6)
	var canceling api.JobDetail
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/40/jobs/%d/cancel", j["cn1"].ID), nil, &canceling)
	if canceling.Status != "canceling" {
		t.Fatalf("cancel of a running job: %s", canceling.Status)
	}

	reap := func(at time.Duration, want builds.ReapResult) {
		t.Helper()
		clock.Set(t0.Add(at))
		got, err := inst.Server.Reaper.ReapOnce(t.Context())
		if err != nil {
			t.Fatalf("reap at t0+%v: %v", at, err)
		}
		if reapCounts(got) != reapCounts(want) {
			t.Fatalf("reap at t0+%v: %s, want %s", at, reapCounts(got), reapCounts(want))
		}
	}
	touch := func(name string) {
		t.Helper()
		u, err := r.UpdateJob(t.Context(), j[name], runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if err != nil || u.Code != http.StatusOK || u.JobStatus != "running" {
			t.Fatalf("touch %s: %d %q %v", name, u.Code, u.JobStatus, err)
		}
	}
	wantReason := func(name, status, why string) {
		t.Helper()
		d := inst.Job(t, 40, jobapitest.JobID(t, p, name))
		if d.Status != status || jobapitest.Reason(d) != why {
			t.Errorf("%s: %s/%q, want %s/%q", name, d.Status, jobapitest.Reason(d), status, why)
		}
		ev := eventsOf(t, inst, 40, jobapitest.JobID(t, p, name), builds.EventDroppedStuck)
		if len(ev) != 1 {
			t.Errorf("%s: %d dropped_stuck events, want 1", name, len(ev))
		}
	}

	// Execution timeout: ex1 (60 s job) was touched, so only its deadline + 15 min counts.
	clock.Set(t0.Add(10 * time.Minute))
	touch("ex1")
	reap(16*time.Minute, builds.ReapResult{}) // deadline t0+1m, cutoff t0+1m: not past it yet
	reap(16*time.Minute+time.Second, builds.ReapResult{ExecutionTimeout: 1})
	wantReason("ex1", "failed", builds.ReasonJobExecutionTimeout)
	wantAborted(t, r, j["ex1"], "failed")

	// Canceling without an answer for 30 min: canceled.
	reap(30*time.Minute, builds.ReapResult{})
	reap(30*time.Minute+time.Second, builds.ReapResult{Canceled: 1})
	wantReason("cn1", "canceled", "")
	wantAborted(t, r, j["cn1"], "canceled")

	// No updates for an hour. nu2 is touched by PUT running, nu3 by a trace patch.
	clock.Set(t0.Add(50 * time.Minute))
	touch("nu2")
	if pr, err := r.PatchTrace(t.Context(), j["nu3"], 0, []byte("still alive\n")); err != nil || pr.Code != http.StatusAccepted {
		t.Fatalf("patch nu3: %d %v", pr.Code, err)
	}
	clock.Set(t0.Add(50*time.Minute + 30*time.Second))
	touch("nu2") // within a minute of the last write: not written
	reap(time.Hour, builds.ReapResult{})
	reap(time.Hour+time.Second, builds.ReapResult{NoUpdates: 2, Retried: 1}) // nu1, nu4 (retry: 1)
	wantReason("nu1", "failed", builds.ReasonNoUpdatesRunning)
	wantReason("nu4", "failed", builds.ReasonNoUpdatesRunning)
	wantAborted(t, r, j["nu1"], "failed")
	wantAborted(t, r, j["nu4"], "failed")
	nu4 := inst.Job(t, 40, j["nu4"].ID)
	if nu4.RetriedBy == nil {
		t.Fatal("nu4 (retry: 1) was not retried after no_updates_running")
	}
	retry := inst.Job(t, 40, *nu4.RetriedBy)
	if retry.Status != "pending" || retry.Attempt != 2 {
		t.Fatalf("retry of nu4: %+v", retry)
	}
	// nu2's last write was t0+50m (its t0+50m30s touch was throttled): it is reaped one
	// hour after the write, 59m31s after the touch, never earlier.
	reap(time.Hour+49*time.Minute+59*time.Second, builds.ReapResult{})
	reap(time.Hour+50*time.Minute+time.Second, builds.ReapResult{NoUpdates: 2}) // nu2, nu3
	wantReason("nu2", "failed", builds.ReasonNoUpdatesRunning)
	wantReason("nu3", "failed", builds.ReasonNoUpdatesRunning)
	wantAborted(t, r, j["nu2"], "failed")
	wantAborted(t, r, j["nu3"], "failed")
	expect(t, inst, p, "running", map[string]string{"pe1": "pending", "nu4": "pending"})

	// Pending for a day: pe1 (queued t0), then the retry of nu4 (queued t0+1h0m1s), whose
	// retries are used up.
	reap(24*time.Hour, builds.ReapResult{})
	reap(24*time.Hour+time.Second, builds.ReapResult{StuckPending: 1})
	wantReason("pe1", "failed", builds.ReasonStuckPending)
	reap(25*time.Hour+2*time.Second, builds.ReapResult{StuckPending: 1})
	if d := inst.Job(t, 40, retry.ID); d.Status != "failed" || jobapitest.Reason(d) != builds.ReasonStuckPending || d.RetriedBy != nil {
		t.Errorf("retry of nu4: %s/%q retried_by %v", d.Status, jobapitest.Reason(d), d.RetriedBy)
	}
	if ev := eventsOf(t, inst, 40, retry.ID, builds.EventRetryExhausted); len(ev) != 1 {
		t.Errorf("retry of nu4: %d retry_exhausted events", len(ev))
	}
	expect(t, inst, p, "failed", nil)
	w := callWait(inst.URL, 40, p.ID, 0)
	if w.err != nil || w.res.JobsRemaining != 0 || len(w.res.Finished) != 8 {
		t.Fatalf("wait: %+v %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
	reap(48*time.Hour, builds.ReapResult{})
}

// TestReapersOnTwoReplicas: both replicas reap the same expired builds at once, in small
// batches whose pipelines come in opposite orders; every build is reaped exactly once and
// the counts add up exactly.
func TestReapersOnTwoReplicas(t *testing.T) {
	t.Parallel()
	const (
		pipelines = 6
		perStage  = 30
		total     = pipelines * perStage
	)
	clock := jobapitest.NewClock(time.Time{})
	a := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) { c.NoUpdatesTimeout = time.Hour }})
	b := a.Replica(t, jobapitest.Options{Now: clock.Now})
	t0 := clock.Now()
	ids := make([]int64, 0, pipelines)
	for range pipelines {
		jobs := []job{{"name": "after", "stage": "test", "script": "x"}}
		for i := range perStage {
			jobs = append(jobs, job{"name": fmt.Sprintf("j%02d", i), "stage": "build", "script": "x", "timeout": "10h"})
		}
		ids = append(ids, createPipeline(t, a, 50, "", []string{"build", "test"}, jobs...).ID)
	}
	var wg sync.WaitGroup
	for range 4 {
		r := a.NewRunner(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j, res, err := r.RequestJob(context.Background())
				if err != nil || (j == nil && res.Code != http.StatusNoContent) {
					t.Errorf("job request: %d %v", res.Code, err)
					return
				}
				if j == nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	// Last updates interleave the pipelines so that consecutive batches of `pipelines`
	// builds visit them in opposite orders: 0..5, 5..0, 0..5...
	tag, err := a.Pool.Exec(t.Context(), `
WITH o AS (
    SELECT id, dense_rank() OVER (ORDER BY pipeline_id) - 1 AS k,
           row_number() OVER (PARTITION BY pipeline_id ORDER BY id) - 1 AS i
    FROM builds WHERE status = 'running'
)
UPDATE builds b SET updated_at = $1::timestamptz + make_interval(secs => (o.i * $2 +
    CASE WHEN o.i % 2 = 0 THEN o.k ELSE $2 - 1 - o.k END) / 1000.0)
FROM o WHERE b.id = o.id`, t0, pipelines)
	if err != nil || tag.RowsAffected() != total {
		t.Fatalf("spread updated_at: %v rows, %v", tag.RowsAffected(), err)
	}
	clock.Set(t0.Add(2 * time.Hour))
	for _, inst := range []*jobapitest.Instance{a, b} {
		inst.Server.Reaper.Params.Batch = pipelines
	}

	var mu sync.Mutex
	sum := builds.ReapResult{}
	calls := 0
	start := time.Now()
	for _, inst := range []*jobapitest.Instance{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := inst.Server.Reaper.ReapOnce(context.Background())
				if err != nil {
					t.Errorf("reap: %v", err)
					return
				}
				mu.Lock()
				calls++
				sum.NoUpdates += res.NoUpdates
				sum.ExecutionTimeout += res.ExecutionTimeout
				sum.StuckPending += res.StuckPending
				sum.Canceled += res.Canceled
				sum.Retried += res.Retried
				mu.Unlock()
				if res.NoUpdates == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if res, err := a.Server.Reaper.ReapOnce(t.Context()); err != nil || res.NoUpdates != 0 {
		t.Fatalf("a last reap found %+v, %v", res, err)
	}
	t.Logf("two replicas reaped %d builds in %d calls of batch %d in %v", sum.NoUpdates, calls, pipelines, took)
	// Opposite pipeline orders in concurrent batches deadlock unless the reapers lock
	// pipelines in one order; each deadlock costs Postgres' deadlock_timeout (1 s).
	if took > 15*time.Second {
		t.Errorf("reaping %d builds took %v: the replicas deadlock on each other", total, took)
	}
	if reapCounts(sum) != reapCounts(builds.ReapResult{NoUpdates: total}) {
		t.Errorf("replicas reported %s, want no_updates=%d exactly", reapCounts(sum), total)
	}
	var failed, events, skipped, failedPipelines int
	if err := a.Pool.QueryRow(t.Context(), `SELECT
        (SELECT count(*) FROM builds WHERE status = 'failed' AND failure_reason = 'no_updates_running'),
        (SELECT count(*) FROM build_events WHERE type = 'dropped_stuck'),
        (SELECT count(*) FROM builds WHERE status = 'skipped'),
        (SELECT count(*) FROM pipelines WHERE status = 'failed' AND id = ANY($1))`, ids).Scan(&failed, &events, &skipped, &failedPipelines); err != nil {
		t.Fatal(err)
	}
	if failed != total || events != total || skipped != pipelines || failedPipelines != pipelines {
		t.Errorf("Postgres: %d reaped builds, %d dropped_stuck events, %d skipped, %d failed pipelines; want %d, %d, %d, %d",
			failed, events, skipped, failedPipelines, total, total, pipelines, pipelines)
	}
}
