package twophase_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// sweepSlack is what a timeout may take beyond TTL + sweep interval: the sweeper's jitter
// (±10 %), the sweep's own duration, and a shared 2-CPU machine under -race (measured
// 0–150 ms on a quiet one; see the test logs).
const sweepSlack = time.Second

// timedOut checks a build failed by the sweeper: reason, events, one retry (or none when
// exhausted), and returns the ack_timeout event and the retry (nil when exhausted).
func timedOut(t *testing.T, inst *jobapitest.Instance, project, id int64, wantRetry bool) (api.Event, *api.JobDetail) {
	t.Helper()
	j := inst.Job(t, project, id)
	wantJob(t, j, stFailed, provisioningTimeout)
	ev := inst.Events(t, project, id)
	timeout := oneEvent(t, ev, "ack_timeout")
	if len(jobapitest.EventsOf(ev, "acknowledged")) != 0 {
		t.Fatalf("job %d both acknowledged and timed out: %s", id, jobapitest.EventTypes(ev))
	}
	var n int
	if err := inst.Pool.QueryRow(context.Background(), `SELECT count(*) FROM builds WHERE retry_of = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if !wantRetry {
		if n != 0 || j.RetriedBy != nil {
			t.Fatalf("job %d: %d retries (retried_by %v), want none", id, n, j.RetriedBy)
		}
		return timeout, nil
	}
	if n != 1 || j.RetriedBy == nil {
		t.Fatalf("job %d: %d retries (retried_by %v), want exactly one", id, n, j.RetriedBy)
	}
	var noKeepalives []api.Event
	for _, e := range ev {
		if e.Type != "keepalive" {
			noKeepalives = append(noKeepalives, e)
		}
	}
	jobapitest.WantEvents(t, noKeepalives, "queued", "assigned", "ack_timeout", "retried")
	retry := inst.Job(t, project, *j.RetriedBy)
	if deref(retry.RetryOf) != id || retry.Attempt != j.Attempt+1 {
		t.Fatalf("retry %d: retry_of %d attempt %d, want %d and %d", retry.ID, deref(retry.RetryOf), retry.Attempt, id, j.Attempt+1)
	}
	return timeout, &retry
}

// TestAckTimeoutRetriesOnce: a build never acknowledged is failed by the background sweeper
// with runner_provisioning_timeout within TTL + interval + slack, and retried exactly once.
func TestAckTimeoutRetriesOnce(t *testing.T) {
	t.Parallel()
	const ttl, interval = time.Second, 100 * time.Millisecond
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.AckTTL, c.SweepInterval = ttl, interval
	}})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_sleepy", true)
	inst.CreatePipeline(t, 1, []string{"test"}, jobDef("a"), jobDef("b"), jobDef("c"))
	took := map[int64]time.Time{}
	var jobs []*runnerclient.Job
	for range 3 {
		job := take(t, r)
		took[job.ID] = time.Now()
		jobs = append(jobs, job)
	}
	acked := jobs[1]
	jobapitest.WantUpdate(t, "ack", r.Put(t, acked, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)

	for _, job := range []*runnerclient.Job{jobs[0], jobs[2]} {
		// Observed from outside: 201 → the retry exists, pending.
		j := inst.WaitJobStatus(t, 1, job.ID, stFailed, ttl+interval+3*sweepSlack)
		observed := time.Since(took[job.ID])
		timeout, retry := timedOut(t, inst, 1, job.ID, true)
		wantJob(t, *retry, stPending, "")
		if timeout.Detail["cause"] != "ack key expired" || detailFloat(t, timeout, "waited_seconds") < ttl.Seconds() {
			t.Fatalf("ack_timeout detail %v, want cause \"ack key expired\" after >= %v", timeout.Detail, ttl)
		}
		// Server side, same clock: assignment → failure + retry (one transaction).
		toTimeout := timeout.At.Sub(*j.AssignedAt)
		toRetry := retry.QueuedAt.Sub(*j.AssignedAt)
		if toTimeout < ttl || toTimeout > ttl+interval+sweepSlack || toRetry != toTimeout {
			t.Fatalf("job %d: assigned→timeout %v, assigned→retry %v; want both equal, in [%v, %v]",
				job.ID, toTimeout, toRetry, ttl, ttl+interval+sweepSlack)
		}
		t.Logf("job %d: assigned→timed out→retry queued %v (server clock); 201→failed seen by polling %v",
			job.ID, toRetry.Round(time.Millisecond), observed.Round(time.Millisecond))
	}
	wantJob(t, inst.Job(t, 1, acked.ID), stRunning, "")
	if ev := inst.Events(t, 1, acked.ID); len(jobapitest.EventsOf(ev, "ack_timeout")) != 0 {
		t.Fatalf("acknowledged job timed out too: %s", jobapitest.EventTypes(ev))
	}
	// The retries go out again with new tokens, two-phase again.
	for range 2 {
		job := r.TakeWithin(t, 2*time.Second)
		j := inst.Job(t, 1, job.ID)
		if j.Attempt != 2 || j.Status != stWaiting || job.Token == jobs[0].Token || job.Token == jobs[2].Token {
			t.Fatalf("next job %d: attempt %d status %s, want a retry (attempt 2) waiting, with a new token", job.ID, j.Attempt, j.Status)
		}
	}
	r.NoJob(t)
	// Sweep cost, from this replica's metrics.
	sum, count := inst.Metric(t, "jobapi_ack_sweep_duration_seconds_sum"), inst.Metric(t, "jobapi_ack_sweep_duration_seconds_count")
	if count == 0 || inst.Metric(t, "jobapi_ack_timeouts_total") != 2 {
		t.Fatalf("metrics: %v sweeps, %v timeouts; want sweeps and 2 timeouts", count, inst.Metric(t, "jobapi_ack_timeouts_total"))
	}
	t.Logf("background sweeps: %v, mean duration %.2f ms", count, sum/count*1000)
}

// TestLateAckAfterTimeoutIsFenced: once the sweeper failed the build, every call of its
// runner gets 403 with Job-Status failed, which makes gitlab-runner drop the job.
func TestLateAckAfterTimeoutIsFenced(t *testing.T) {
	t.Parallel()
	const ttl = 500 * time.Millisecond
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) { c.AckTTL = ttl }})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_late", true)
	inst.CreatePipeline(t, 1, []string{"test"}, jobDef("a"))
	job := take(t, r)
	inst.WaitJobStatus(t, 1, job.ID, stFailed, ttl+3*sweepSlack)

	res := r.Put(t, job, stRunning, runnerclient.UpdateOptions{})
	jobapitest.WantUpdate(t, "late ack", res, http.StatusForbidden, stFailed)
	if res.State != runnerclient.UpdateAbort {
		t.Fatalf("late ack: runner reads %v, want abort", res.State)
	}
	jobapitest.WantUpdate(t, "late keep-alive", r.Put(t, job, stPending, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
	jobapitest.WantUpdate(t, "late decline", r.Put(t, job, stFailed, runnerclient.UpdateOptions{FailureReason: "runner_system_failure"}), http.StatusForbidden, stFailed)
	jobapitest.WantUpdate(t, "late final", r.Put(t, job, stSuccess, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
	pr, err := r.PatchTrace(context.Background(), job, 0, []byte("hello\n"))
	if err != nil || pr.Code != http.StatusForbidden || pr.JobStatus != stFailed || pr.State != runnerclient.PatchAbort {
		t.Fatalf("late trace patch: %d Job-Status %q state %v err %v, want 403 failed abort", pr.Code, pr.JobStatus, pr.State, err)
	}
	// Nothing of it changed the build or its retry.
	_, retry := timedOut(t, inst, 1, job.ID, true)
	wantJob(t, *retry, stPending, "")
	if j := inst.Job(t, 1, job.ID); j.TraceSize != 0 {
		t.Fatalf("late trace stored: %d bytes", j.TraceSize)
	}
}

// TestRetryLimit: with JOBAPI_AUTO_RETRY_MAX=2 a build that is never acknowledged gets three
// attempts, then stays failed with retry_exhausted; the job JSON links the chain.
func TestRetryLimit(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.AckTTL, c.AutoRetryMax = ttl, 2
	}})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_never", true)
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobDef("flaky"))
	want := p.Jobs[0].ID
	var chain []api.JobDetail
	for attempt := 1; attempt <= 3; attempt++ {
		job := r.TakeWithin(t, 2*time.Second)
		if job.ID != want {
			t.Fatalf("attempt %d: got job %d, want %d", attempt, job.ID, want)
		}
		if v, _ := job.Variable("CI_JOB_ATTEMPT"); v != strconv.Itoa(attempt) {
			t.Fatalf("attempt %d: CI_JOB_ATTEMPT=%q", attempt, v)
		}
		inst.WaitJobStatus(t, 1, job.ID, stFailed, ttl+3*sweepSlack)
		_, retry := timedOut(t, inst, 1, job.ID, attempt < 3)
		chain = append(chain, inst.Job(t, 1, job.ID))
		if retry != nil {
			want = retry.ID
		}
	}
	r.NoJob(t)
	for i, j := range chain {
		wantRetryOf, wantRetriedBy := int64(0), int64(0)
		if i > 0 {
			wantRetryOf = chain[i-1].ID
		}
		if i < len(chain)-1 {
			wantRetriedBy = chain[i+1].ID
		}
		if j.Attempt != i+1 || deref(j.RetryOf) != wantRetryOf || deref(j.RetriedBy) != wantRetriedBy {
			t.Fatalf("attempt %d: job %d attempt %d retry_of %d retried_by %d, want retry_of %d retried_by %d",
				i+1, j.ID, j.Attempt, deref(j.RetryOf), deref(j.RetriedBy), wantRetryOf, wantRetriedBy)
		}
		ev := inst.Events(t, 1, j.ID)
		if n := len(jobapitest.EventsOf(ev, "retry_exhausted")); n != map[bool]int{true: 1, false: 0}[i == 2] {
			t.Fatalf("attempt %d: %d retry_exhausted events in %s", i+1, n, jobapitest.EventTypes(ev))
		}
	}
	last := inst.Events(t, 1, chain[2].ID)
	jobapitest.WantEvents(t, last, "queued", "assigned", "ack_timeout", "retry_exhausted")
	ex := last[3].Detail
	if ex["reason"] != provisioningTimeout || ex["attempts"] != float64(3) || ex["limit"] != float64(2) {
		t.Fatalf("retry_exhausted detail %v, want reason %s, attempts 3, limit 2", ex, provisioningTimeout)
	}
	var pl api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d", p.ID), nil, &pl)
	if pl.Status != stFailed || len(pl.Jobs) != 3 {
		t.Fatalf("pipeline: status %s with %d jobs, want failed with the 3 attempts", pl.Status, len(pl.Jobs))
	}
}

// TestKeepaliveUntilMaxWait: keep-alives hold a build waiting past its TTL (the sweeper
// moves the deadline of record while the key lives), each granting at most what is left of
// JOBAPI_MAX_PROVISIONING_WAIT; past it the build times out and is retried once.
func TestKeepaliveUntilMaxWait(t *testing.T) {
	t.Parallel()
	const ttl, maxWait, interval = time.Second, 2500 * time.Millisecond, 100 * time.Millisecond
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.AckTTL, c.MaxProvisioningWait, c.SweepInterval = ttl, maxWait, interval
	}})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_slowboot", true)
	inst.CreatePipeline(t, 1, []string{"test"}, jobDef("a"))
	job := take(t, r)
	assigned := *inst.Job(t, 1, job.ID).AssignedAt
	limit := assigned.Add(maxWait)

	var last runnerclient.UpdateResult
	var recordMax time.Time // latest deadline of record seen: the sweeper moves it
	oks := 0
	for {
		last = r.Put(t, job, stPending, runnerclient.UpdateOptions{})
		if last.Code != http.StatusOK {
			break
		}
		oks++
		jobapitest.WantUpdate(t, "keep-alive", last, http.StatusOK, stWaiting)
		j := inst.Job(t, 1, job.ID)
		if j.Status != stWaiting {
			t.Fatalf("keep-alive %d answered 200 but the job is %s", oks, j.Status)
		}
		if ttl := ackTTLSeconds(t, j); ttl > 1 || j.Ack.Deadline == nil || j.Ack.Deadline.After(limit.Add(250*time.Millisecond)) {
			t.Fatalf("keep-alive %d: ack %v s until %v, past the max wait (%v)", oks, ttl, j.Ack.Deadline, limit)
		}
		var deadline time.Time
		if err := inst.Pool.QueryRow(context.Background(), `SELECT ack_deadline FROM builds WHERE id = $1`, job.ID).Scan(&deadline); err != nil {
			t.Fatal(err)
		}
		if deadline.After(recordMax) {
			recordMax = deadline
		}
		if time.Since(assigned) > 4*maxWait {
			t.Fatalf("keep-alives still accepted %v after assignment", time.Since(assigned))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Past the max wait: 403, so the runner drops the job. Until the sweeper gets there the
	// build still waits in Postgres, hence either Job-Status.
	if last.Code != http.StatusForbidden || (last.JobStatus != stWaiting && last.JobStatus != stFailed) || last.State != runnerclient.UpdateAbort {
		t.Fatalf("keep-alive past the max wait: %d Job-Status %q, want 403", last.Code, last.JobStatus)
	}
	if oks < 3 {
		t.Fatalf("only %d keep-alives accepted in %v", oks, maxWait)
	}
	if !recordMax.After(assigned.Add(ttl)) || recordMax.After(limit) {
		t.Fatalf("deadline of record reached %v after assignment, want moved past the TTL (%v) and capped at %v",
			recordMax.Sub(assigned), ttl, maxWait)
	}

	// Every accepted keep-alive granted at most what was left of the max wait.
	ev := inst.Events(t, 1, job.ID)
	kas := jobapitest.EventsOf(ev, "keepalive")
	if len(kas) != oks {
		t.Fatalf("%d keepalive events for %d accepted keep-alives", len(kas), oks)
	}
	for _, e := range kas {
		granted := time.Duration(detailFloat(t, e, "ttl_seconds") * float64(time.Second))
		if granted > ttl || e.At.Add(granted).After(limit.Add(time.Millisecond)) {
			t.Fatalf("keepalive at +%v granted %v: past the max wait", e.At.Sub(assigned), granted)
		}
	}
	if lastOK := kas[len(kas)-1].At.Sub(assigned); lastOK < ttl+500*time.Millisecond {
		t.Fatalf("last keep-alive accepted at +%v: the build did not stay waiting well past its %v TTL", lastOK, ttl)
	}
	j := inst.WaitJobStatus(t, 1, job.ID, stFailed, interval+3*sweepSlack)
	timeout, retry := timedOut(t, inst, 1, job.ID, true)
	// The last keep-alive's key expires at the max wait too, so either cause may be recorded,
	// give or take the millisecond rounding of PTTL.
	if c := timeout.Detail["cause"]; c != "max provisioning wait exceeded" && c != "ack key expired" {
		t.Fatalf("ack_timeout detail %v, want a max-wait or key-expired cause", timeout.Detail)
	}
	if took := timeout.At.Sub(*j.AssignedAt); took < maxWait-10*time.Millisecond || took > maxWait+interval+sweepSlack {
		t.Fatalf("timed out %v after assignment, want in [%v, %v]", took, maxWait, maxWait+interval+sweepSlack)
	}
	t.Logf("%d keep-alives (TTL %v), the last accepted at +%v; deadline of record moved to +%v; timed out at +%v",
		oks, ttl, kas[len(kas)-1].At.Sub(assigned).Round(time.Millisecond), recordMax.Sub(assigned).Round(time.Millisecond),
		timeout.At.Sub(assigned).Round(time.Millisecond))
	wantJob(t, *retry, stPending, "")
	jobapitest.WantUpdate(t, "ack after the max wait", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
}

// TestMaxWaitShorterThanTTL: the TTL granted at assignment never reaches past the max
// provisioning wait either.
func TestMaxWaitShorterThanTTL(t *testing.T) {
	t.Parallel()
	const ttl, maxWait = 5 * time.Second, time.Second
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.AckTTL, c.MaxProvisioningWait = ttl, maxWait
	}})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_short", true)
	inst.CreatePipeline(t, 1, []string{"test"}, jobDef("a"))
	job := take(t, r)
	j := inst.Job(t, 1, job.ID)
	if got := ackTTLSeconds(t, j); got > maxWait.Seconds() {
		t.Fatalf("ack.ttl_seconds = %v right after assignment, want <= max wait %v", got, maxWait.Seconds())
	}
	if d := ackKeyTTL(t, inst, job.ID); d > maxWait {
		t.Fatalf("ack key PTTL %v, want <= max wait %v", d, maxWait)
	}
}
