package twophase_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// outcomes counts how a build left waiting_for_runner_ack: exactly one of these per build.
func outcomes(t *testing.T, inst *jobapitest.Instance, project, id int64) int {
	t.Helper()
	ev := inst.Events(t, project, id)
	return len(jobapitest.EventsOf(ev, "acknowledged")) + len(jobapitest.EventsOf(ev, "ack_timeout")) + len(jobapitest.EventsOf(ev, "declined"))
}

// TestRedisLosesEverything: SPEC §2 and §11.5. Redis forgets every ack key (FLUSHDB), then
// restarts empty, while builds wait. Postgres holds the truth: acks that arrive before the
// sweep still win, the abandoned builds time out at their deadline of record (not later,
// not earlier) and are retried once, their late acks are fenced with 403, and every build
// has exactly one outcome.
func TestRedisLosesEverything(t *testing.T) {
	t.Parallel()
	own := testenv.OwnRedis(t)
	// The TTL must outlast taking eight jobs, the flush and the checks below under a loaded
	// -race run, or the builds meant to be acked in time time out first (seen at load 30
	// with 1.5 s).
	const ttl, interval = 3 * time.Second, 100 * time.Millisecond
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.RedisURL, c.AckTTL, c.SweepInterval = own.URL, ttl, interval
	}})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	opt, err := redis.ParseURL(own.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()

	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_flush", true)
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var defs []jobapitest.Job
	for _, n := range names {
		defs = append(defs, jobDef(n))
	}
	inst.CreatePipeline(t, 1, []string{"test"}, defs...)
	var jobs []*runnerclient.Job
	for range names {
		jobs = append(jobs, take(t, r))
	}
	r.NoJob(t)

	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, job := range jobs {
		if d := ackKeyTTL(t, inst, job.ID); d != -2 {
			t.Fatalf("ack key of %d survived FLUSHDB (PTTL %v)", job.ID, d)
		}
	}
	// Postgres still says waiting, and the job JSON falls back to the deadline of record.
	if j := inst.Job(t, 1, jobs[7].ID); ackTTLSeconds(t, j) <= 0 || ackTTLSeconds(t, j) > ttl.Seconds() {
		t.Fatalf("after FLUSHDB: ack %+v, want the deadline of record", j.Ack)
	}

	// The builds acked in time are the last two handed out: the most time left before their
	// deadline. The abandoned ones are the first.
	abandoned, kept, declined, acked := jobs[:4], jobs[4], jobs[5], jobs[6:]
	for _, job := range acked {
		jobapitest.WantUpdate(t, "ack after FLUSHDB", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
	}
	jobapitest.WantUpdate(t, "decline after FLUSHDB", r.Put(t, declined, stFailed, runnerclient.UpdateOptions{FailureReason: "runner_system_failure"}),
		http.StatusOK, stFailed)
	// The kept build's runner sends keep-alives (each recreates its key) until the abandoned
	// builds have timed out.
	for done := false; !done; {
		jobapitest.WantUpdate(t, "keep-alive after FLUSHDB", r.Put(t, kept, stPending, runnerclient.UpdateOptions{}), http.StatusOK, stWaiting)
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			done = true
			for _, job := range abandoned {
				done = done && inst.Job(t, 1, job.ID).Status == stFailed
			}
			if done {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if time.Since(*inst.Job(t, 1, abandoned[0].ID).AssignedAt) > ttl+interval+3*sweepSlack {
			t.Fatal("abandoned builds not timed out after FLUSHDB")
		}
	}
	var retries []int64
	for _, job := range abandoned {
		timeout, retry := timedOut(t, inst, 1, job.ID, true)
		assigned := *inst.Job(t, 1, job.ID).AssignedAt
		if took := timeout.At.Sub(assigned); took < ttl || took > ttl+interval+sweepSlack {
			t.Fatalf("job %d timed out %v after assignment, want at its deadline of record [%v, %v]", job.ID, took, ttl, ttl+interval+sweepSlack)
		}
		retries = append(retries, retry.ID)
		jobapitest.WantUpdate(t, "late ack after FLUSHDB", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
	}
	// The kept build is past its original deadline, still waiting: its ack wins.
	k := inst.Job(t, 1, kept.ID)
	wantJob(t, k, stWaiting, "")
	if time.Since(*k.AssignedAt) < ttl {
		t.Fatalf("kept build checked %v after assignment, before its original deadline", time.Since(*k.AssignedAt))
	}
	jobapitest.WantUpdate(t, "ack of the kept build", r.Put(t, kept, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
	for _, job := range jobs {
		if n := outcomes(t, inst, 1, job.ID); n != 1 {
			t.Fatalf("job %d: %d outcomes (acknowledged+ack_timeout+declined), want exactly 1", job.ID, n)
		}
	}
	d := inst.Job(t, 1, declined.ID)
	retries = append(retries, deref(d.RetriedBy))

	// Nothing lost: the five retries reach a runner although the queue version was flushed.
	var got []int64
	var second []*runnerclient.Job
	for range retries {
		job := r.TakeWithin(t, 3*time.Second)
		got = append(got, job.ID)
		second = append(second, job)
	}
	r.NoJob(t)
	slices.Sort(got)
	slices.Sort(retries)
	if !slices.Equal(got, retries) {
		t.Fatalf("after FLUSHDB the runner got %v, want the retries %v", got, retries)
	}

	// Now Redis restarts, empty, while the retries wait. One is acked during the outage
	// window, the rest are abandoned: same rules.
	start := time.Now()
	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("redis-server restarted in %v", time.Since(start).Round(time.Millisecond))
	ackRes := r.Put(t, second[0], stRunning, runnerclient.UpdateOptions{})
	if ackRes.Code != http.StatusOK && ackRes.Code != http.StatusServiceUnavailable {
		t.Fatalf("ack right after the Redis restart: %d, want 200 (or a 503 to retry)", ackRes.Code)
	}
	if ackRes.Code == http.StatusServiceUnavailable {
		ackRes = r.Put(t, second[0], stRunning, runnerclient.UpdateOptions{})
	}
	jobapitest.WantUpdate(t, "ack after the Redis restart", ackRes, http.StatusOK, stRunning)
	for _, job := range second[1:] {
		inst.WaitJobStatus(t, 1, job.ID, stFailed, ttl+interval+3*sweepSlack)
		timeout, _ := timedOut(t, inst, 1, job.ID, true)
		if took := timeout.At.Sub(*inst.Job(t, 1, job.ID).AssignedAt); took < ttl {
			t.Fatalf("job %d timed out %v after assignment: earlier than its deadline of record", job.ID, took)
		}
		jobapitest.WantUpdate(t, "late ack after the Redis restart", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
	}
	for _, job := range second {
		if n := outcomes(t, inst, 1, job.ID); n != 1 {
			t.Fatalf("job %d: %d outcomes after the restart, want exactly 1", job.ID, n)
		}
	}
	// Their retries (attempt 3) are handed out again.
	for range second[1:] {
		job := r.TakeWithin(t, 3*time.Second)
		if j := inst.Job(t, 1, job.ID); j.Attempt != 3 {
			t.Fatalf("after the restart the runner got job %d attempt %d, want a third attempt", job.ID, j.Attempt)
		}
	}
	r.NoJob(t)
}
