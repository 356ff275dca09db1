package twophase_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// putTable is one instance shared by the rows of SPEC §4's PUT table; every row works on
// builds of its own (a unique tag) so the rows run in parallel.
type putTable struct {
	inst    *jobapitest.Instance
	project int64
}

// assign creates a one-job pipeline and hands the job to a new two-phase runner.
func (p *putTable) assign(t *testing.T) (*jobapitest.Runner, *runnerclient.Job) {
	t.Helper()
	tag := uniqueTag()
	r := taggedRunner(t, p.inst, tag, true)
	p.inst.CreatePipeline(t, p.project, []string{"test"}, jobDef("build", tag))
	job := take(t, r)
	if j := p.inst.Job(t, p.project, job.ID); j.Status != stWaiting || !j.TwoPhase {
		t.Fatalf("job %d: status %s two_phase %v, want waiting_for_runner_ack", job.ID, j.Status, j.TwoPhase)
	}
	return r, job
}

// running assigns a job and acknowledges it.
func (p *putTable) running(t *testing.T) (*jobapitest.Runner, *runnerclient.Job) {
	t.Helper()
	r, job := p.assign(t)
	jobapitest.WantUpdate(t, "ack", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
	return r, job
}

func (p *putTable) job(t *testing.T, id int64) api.JobDetail {
	t.Helper()
	return p.inst.Job(t, p.project, id)
}

func (p *putTable) cancel(t *testing.T, id int64) api.JobDetail {
	t.Helper()
	var j api.JobDetail
	p.inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/cancel", p.project, id), nil, &j)
	return j
}

// TestPutTable walks every row of SPEC §4's PUT /jobs/:id table on a two-phase build.
func TestPutTable(t *testing.T) {
	t.Parallel()
	const ackTTL = 30 * time.Second
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.AckTTL = ackTTL }})
	p := &putTable{inst: inst, project: 11}
	enableFlag(t, inst, p.project)
	inst.WaitFlags(t)

	t.Run("waiting+running acknowledges", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		j := p.job(t, job.ID)
		if ttl := ackTTLSeconds(t, j); ttl <= 0 || ttl > ackTTL.Seconds() {
			t.Fatalf("ack.ttl_seconds = %v, want in (0, %v]", ttl, ackTTL.Seconds())
		}
		if j.RunnerManager == nil || j.RunnerManager.SystemID != r.SystemID || j.StartedAt != nil {
			t.Fatalf("waiting job: runner_manager %+v started_at %v, want %s and no start", j.RunnerManager, j.StartedAt, r.SystemID)
		}
		if d := ackKeyTTL(t, inst, job.ID); d <= 0 || d > ackTTL {
			t.Fatalf("ack key PTTL = %v, want in (0, %v]", d, ackTTL)
		}

		res := r.Put(t, job, stRunning, runnerclient.UpdateOptions{})
		jobapitest.WantUpdate(t, "ack", res, http.StatusOK, stRunning)
		if res.State != runnerclient.UpdateSucceeded || res.CancelRequested {
			t.Fatalf("ack: runner reads %v cancel=%v, want succeeded", res.State, res.CancelRequested)
		}
		j = p.job(t, job.ID)
		wantJob(t, j, stRunning, "")
		if j.StartedAt == nil || j.Ack != nil {
			t.Fatalf("acked job: started_at %v ack %+v, want a start and no ack", j.StartedAt, j.Ack)
		}
		if d := ackKeyTTL(t, inst, job.ID); d != -2 {
			t.Fatalf("ack key still there after the ack (PTTL %v)", d)
		}
		ev := inst.Events(t, p.project, job.ID)
		jobapitest.WantEvents(t, ev, "queued", "assigned", "acknowledged")
		if ev[1].Detail["two_phase"] != true {
			t.Fatalf("assigned event detail %v, want two_phase true", ev[1].Detail)
		}
		ack := ev[2]
		latency := detailFloat(t, ack, "assign_to_ack_seconds")
		if latency < 0 || latency > 10 || ack.RunnerManager != r.SystemID {
			t.Fatalf("acknowledged event: latency %v s, manager %q; want [0, 10) s by %s", latency, ack.RunnerManager, r.SystemID)
		}
		t.Logf("assign→ack latency (single runner, in-process): %.1f ms", latency*1000)
	})

	t.Run("waiting+pending refreshes the TTL", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		before := ackTTLSeconds(t, p.job(t, job.ID))
		time.Sleep(300 * time.Millisecond)
		aged := ackTTLSeconds(t, p.job(t, job.ID))
		if aged >= before-0.2 {
			t.Fatalf("ack.ttl_seconds went %v → %v in 300 ms; the key does not count down", before, aged)
		}
		res := r.Put(t, job, stPending, runnerclient.UpdateOptions{})
		jobapitest.WantUpdate(t, "keep-alive", res, http.StatusOK, stWaiting)
		after := ackTTLSeconds(t, p.job(t, job.ID))
		if after <= aged+0.2 || after > ackTTL.Seconds() {
			t.Fatalf("ack.ttl_seconds %v before the keep-alive, %v after; want it back near %v", aged, after, ackTTL.Seconds())
		}
		ev := inst.Events(t, p.project, job.ID)
		jobapitest.WantEvents(t, ev, "queued", "assigned", "keepalive")
		if ttl := detailFloat(t, ev[2], "ttl_seconds"); ttl != ackTTL.Seconds() {
			t.Fatalf("keepalive event ttl_seconds = %v, want %v", ttl, ackTTL.Seconds())
		}
		// Still waiting: the ack afterwards wins normally.
		jobapitest.WantUpdate(t, "ack after keep-alive", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
	})

	t.Run("waiting+failed declines and retries at once", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		res := r.Put(t, job, stFailed, runnerclient.UpdateOptions{FailureReason: "runner_system_failure", ExitCode: 1})
		jobapitest.WantUpdate(t, "decline", res, http.StatusOK, stFailed)
		old := p.job(t, job.ID)
		wantJob(t, old, stFailed, "runner_system_failure")
		if old.RetriedBy == nil {
			t.Fatal("declined job was not retried")
		}
		if d := ackKeyTTL(t, inst, job.ID); d != -2 {
			t.Fatalf("ack key still there after the decline (PTTL %v)", d)
		}
		jobapitest.WantEvents(t, inst.Events(t, p.project, job.ID), "queued", "assigned", "declined", "retried")
		retry := p.job(t, *old.RetriedBy)
		wantJob(t, retry, stPending, "")
		if retry.Attempt != 2 || deref(retry.RetryOf) != job.ID || retry.Runner != nil {
			t.Fatalf("retry: attempt %d retry_of %v runner %+v, want attempt 2 of %d, unassigned", retry.Attempt, deref(retry.RetryOf), retry.Runner, job.ID)
		}
		// The retry is handed out again, with a new token; the old token does not open it.
		again := take(t, r)
		if again.ID != retry.ID || again.Token == job.Token {
			t.Fatalf("next job %d (token reused: %v), want the retry %d with a new token", again.ID, again.Token == job.Token, retry.ID)
		}
		stale := &runnerclient.Job{ID: again.ID, Token: job.Token}
		jobapitest.WantUpdate(t, "old token on the retry", r.Put(t, stale, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, "")
		// The same decline sent again (its answer was lost) is a 200; anything else a 403.
		jobapitest.WantUpdate(t, "decline again", r.Put(t, job, stFailed, runnerclient.UpdateOptions{FailureReason: "runner_system_failure"}), http.StatusOK, stFailed)
		jobapitest.WantUpdate(t, "ack after decline", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
	})

	t.Run("no longer waiting: timed out by the sweeper", func(t *testing.T) {
		t.Parallel()
		// An instance of its own: a short TTL, and the sweep below must not touch other rows.
		const ttl = 300 * time.Millisecond
		inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.AckTTL = ttl }})
		enableFlag(t, inst, 1)
		inst.WaitFlags(t)
		r := newRunner(t, inst.URL, runnerToken(t, inst), "s_timeout", true)
		inst.CreatePipeline(t, 1, []string{"test"}, jobDef("build"))
		job := take(t, r)
		time.Sleep(ttl + 50*time.Millisecond)
		rep, err := inst.Sweeper.SweepOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.TimedOut != 1 || rep.Retried != 1 || !slices.Equal(rep.TimedOutIDs, []int64{job.ID}) {
			t.Fatalf("sweep report %+v, want build %d timed out and retried", rep, job.ID)
		}
		t.Logf("SweepOnce with one expired build: %v", rep.Duration)
		for _, state := range []string{stRunning, stPending, stFailed} {
			res := r.Put(t, job, state, runnerclient.UpdateOptions{FailureReason: failureFor(state)})
			jobapitest.WantUpdate(t, "state="+state+" after the timeout", res, http.StatusForbidden, stFailed)
		}
		j := inst.Job(t, 1, job.ID)
		wantJob(t, j, stFailed, provisioningTimeout)
		if j.RetriedBy == nil {
			t.Fatal("timed-out job not retried")
		}
	})

	t.Run("no longer waiting: canceled by an operator", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		if j := p.cancel(t, job.ID); j.Status != stCanceled {
			t.Fatalf("cancel of a waiting job: status %s, want canceled", j.Status)
		}
		if d := ackKeyTTL(t, inst, job.ID); d != -2 {
			t.Fatalf("ack key still there after the cancel (PTTL %v)", d)
		}
		for _, state := range []string{stRunning, stPending, stFailed} {
			res := r.Put(t, job, state, runnerclient.UpdateOptions{FailureReason: failureFor(state)})
			jobapitest.WantUpdate(t, "state="+state+" after the cancel", res, http.StatusForbidden, stCanceled)
		}
		j := p.job(t, job.ID)
		wantJob(t, j, stCanceled, "")
		if j.RetriedBy != nil {
			t.Fatalf("canceled job retried by %d; job_canceled is never retried", *j.RetriedBy)
		}
		jobapitest.WantEvents(t, inst.Events(t, p.project, job.ID), "queued", "assigned", "canceled")
	})

	t.Run("no longer waiting: retried", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		p.cancel(t, job.ID)
		var retry api.JobDetail
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/retry", p.project, job.ID), nil, &retry)
		if retry.Status != stPending || deref(retry.RetryOf) != job.ID || retry.Attempt != 2 {
			t.Fatalf("operator retry: %+v, want a pending attempt 2 of %d", retry, job.ID)
		}
		jobapitest.WantUpdate(t, "ack of the retried attempt", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, stCanceled)
		stale := &runnerclient.Job{ID: retry.ID, Token: job.Token}
		jobapitest.WantUpdate(t, "old token on the new attempt", r.Put(t, stale, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, "")
		again := take(t, r)
		if again.ID != retry.ID {
			t.Fatalf("next job %d, want the retry %d", again.ID, retry.ID)
		}
		jobapitest.WantUpdate(t, "ack of the new attempt", r.Put(t, again, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
	})

	t.Run("running+running touches", func(t *testing.T) {
		t.Parallel()
		r, job := p.running(t)
		for _, state := range []string{stRunning, stPending, stRunning} {
			res := r.Put(t, job, state, runnerclient.UpdateOptions{Checksum: "crc32:00000000"})
			jobapitest.WantUpdate(t, "touch state="+state, res, http.StatusOK, stRunning)
		}
		wantJob(t, p.job(t, job.ID), stRunning, "")
		jobapitest.WantEvents(t, inst.Events(t, p.project, job.ID), "queued", "assigned", "acknowledged")
	})

	t.Run("running+success is final", func(t *testing.T) {
		t.Parallel()
		r, job := p.running(t)
		opts := runnerclient.UpdateOptions{Checksum: "crc32:00000000"}
		jobapitest.WantUpdate(t, "success", r.Put(t, job, stSuccess, opts), http.StatusOK, stSuccess)
		j := p.job(t, job.ID)
		wantJob(t, j, stSuccess, "")
		if j.FinishedAt == nil || j.RetriedBy != nil {
			t.Fatalf("finished job: finished_at %v retried_by %v", j.FinishedAt, j.RetriedBy)
		}
		// SPEC §4: the same final update again is a 200 (lost answer); anything else a 403.
		jobapitest.WantUpdate(t, "success again", r.Put(t, job, stSuccess, opts), http.StatusOK, stSuccess)
		for _, state := range []string{stRunning, stPending, stFailed} {
			res := r.Put(t, job, state, runnerclient.UpdateOptions{FailureReason: failureFor(state)})
			jobapitest.WantUpdate(t, "state="+state+" after success", res, http.StatusForbidden, stSuccess)
		}
		jobapitest.WantEvents(t, inst.Events(t, p.project, job.ID), "queued", "assigned", "acknowledged", "finished")
	})

	t.Run("running+failed is final", func(t *testing.T) {
		t.Parallel()
		r, job := p.running(t)
		opts := runnerclient.UpdateOptions{FailureReason: "script_failure", ExitCode: 2}
		jobapitest.WantUpdate(t, "failed", r.Put(t, job, stFailed, opts), http.StatusOK, stFailed)
		j := p.job(t, job.ID)
		wantJob(t, j, stFailed, "script_failure")
		if j.ExitCode == nil || *j.ExitCode != 2 || j.RetriedBy != nil {
			t.Fatalf("failed job: exit_code %v retried_by %v, want 2 and no retry", j.ExitCode, j.RetriedBy)
		}
		jobapitest.WantUpdate(t, "failed again", r.Put(t, job, stFailed, opts), http.StatusOK, stFailed)
		for _, state := range []string{stRunning, stPending, stSuccess} {
			jobapitest.WantUpdate(t, "state="+state+" after failed", r.Put(t, job, state, runnerclient.UpdateOptions{}), http.StatusForbidden, stFailed)
		}
	})

	t.Run("running with cancel requested answers canceling", func(t *testing.T) {
		t.Parallel()
		r, job := p.running(t)
		if j := p.cancel(t, job.ID); j.Status != "canceling" {
			t.Fatalf("cancel of a running job: status %s, want canceling", j.Status)
		}
		res := r.Put(t, job, stRunning, runnerclient.UpdateOptions{})
		jobapitest.WantUpdate(t, "touch while canceling", res, http.StatusOK, "canceling")
		if !res.CancelRequested || res.State != runnerclient.UpdateSucceeded {
			t.Fatalf("runner reads %v cancel=%v, want a graceful cancel", res.State, res.CancelRequested)
		}
		// The runner ends with after_script and reports job_canceled.
		final := runnerclient.UpdateOptions{FailureReason: "job_canceled"}
		jobapitest.WantUpdate(t, "final after cancel", r.Put(t, job, stFailed, final), http.StatusOK, stCanceled)
		wantJob(t, p.job(t, job.ID), stCanceled, "")
		jobapitest.WantUpdate(t, "final after cancel, again", r.Put(t, job, stFailed, final), http.StatusOK, stCanceled)
		jobapitest.WantUpdate(t, "touch after canceled", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, stCanceled)
	})

	t.Run("bad state or malformed body is 400", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		for _, body := range []string{
			fmt.Sprintf(`{"token":%q,"state":"bogus"}`, job.Token),
			fmt.Sprintf(`{"token":%q}`, job.Token),
			fmt.Sprintf(`{"token":%q,"state":"RUNNING"}`, job.Token),
			fmt.Sprintf(`{"token":%q,"state":1}`, job.Token),
			fmt.Sprintf(`{"token":%q,"state":"failed","failure_reason":"no_such_reason"}`, job.Token),
			fmt.Sprintf(`{"token":%q,"state":"running"`, job.Token),
			fmt.Sprintf(`{"token":%q,"state":"running"} {}`, job.Token),
			`not json`,
			``,
		} {
			code, h, b := rawPut(t, inst.URL, job.ID, job.Token, body)
			if code != http.StatusBadRequest {
				t.Fatalf("body %q: status %d (%s), want 400", body, code, b)
			}
			wantJSONMessage(t, fmt.Sprintf("body %q", body), h, b)
		}
		// A waiting build cannot succeed before its ack (not in the table; the runner never
		// does it): refused the same way.
		res := r.Put(t, job, stSuccess, runnerclient.UpdateOptions{})
		if res.Code != http.StatusBadRequest {
			t.Fatalf("success while waiting: %d, want 400", res.Code)
		}
		// None of it touched the build.
		wantJob(t, p.job(t, job.ID), stWaiting, "")
		jobapitest.WantEvents(t, inst.Events(t, p.project, job.ID), "queued", "assigned")
		jobapitest.WantUpdate(t, "ack after bad requests", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
	})

	t.Run("wrong job token is 403", func(t *testing.T) {
		t.Parallel()
		r, job := p.assign(t)
		_, other := p.assign(t)
		for name, j := range map[string]*runnerclient.Job{
			"another job's token": {ID: job.ID, Token: other.Token},
			"made-up token":       {ID: job.ID, Token: "glcbt-" + strings.Repeat("0", 40)},
			"no token":            {ID: job.ID},
			"unknown job id":      {ID: job.ID + 1_000_000, Token: job.Token},
		} {
			for _, state := range []string{stRunning, stPending, stFailed} {
				res := r.Put(t, j, state, runnerclient.UpdateOptions{FailureReason: failureFor(state)})
				jobapitest.WantUpdate(t, name+" state="+state, res, http.StatusForbidden, "")
			}
		}
		code, h, b := rawPut(t, inst.URL, job.ID, other.Token, `{"state":"running"}`)
		if code != http.StatusForbidden {
			t.Fatalf("header token of another job: %d, want 403", code)
		}
		wantJSONMessage(t, "403", h, b)
		wantJob(t, p.job(t, job.ID), stWaiting, "")
		jobapitest.WantEvents(t, inst.Events(t, p.project, job.ID), "queued", "assigned")
		// The token in the body alone is accepted (gitlab-runner sends both).
		code, _, b = rawPut(t, inst.URL, job.ID, "", fmt.Sprintf(`{"token":%q,"state":"running"}`, job.Token))
		if code != http.StatusOK {
			t.Fatalf("ack with the token in the body only: %d %s, want 200", code, b)
		}
	})
}

// failureFor gives a failed update its reason.
func failureFor(state string) string {
	if state == stFailed {
		return "runner_system_failure"
	}
	return ""
}

// runnerToken registers an untagged runner and returns its token.
func runnerToken(t testing.TB, inst *jobapitest.Instance) string {
	t.Helper()
	_, token := inst.CreateRunner(t)
	return token
}

// TestGating: two-phase applies only when the flag is on for the build's project and the
// runner declares info.features.two_phase_job_commit; otherwise the legacy flow.
func TestGating(t *testing.T) {
	t.Parallel()
	const on, off = 1, 2
	inst := jobapitest.Start(t, jobapitest.Options{})
	enableFlag(t, inst, on)
	inst.WaitFlags(t)

	// legacy checks a job handed out without two-phase.
	legacy := func(t *testing.T, inst *jobapitest.Instance, project int64, r *jobapitest.Runner, job *runnerclient.Job) {
		t.Helper()
		j := inst.Job(t, project, job.ID)
		wantJob(t, j, stRunning, "")
		if j.TwoPhase || j.Ack != nil || j.StartedAt == nil {
			t.Fatalf("legacy job: two_phase %v ack %+v started_at %v", j.TwoPhase, j.Ack, j.StartedAt)
		}
		if d := ackKeyTTL(t, inst, job.ID); d != -2 {
			t.Fatalf("legacy job has an ack key (PTTL %v)", d)
		}
		ev := inst.Events(t, project, job.ID)
		jobapitest.WantEvents(t, ev, "queued", "assigned")
		if ev[1].Detail["two_phase"] != false {
			t.Fatalf("assigned event %v, want two_phase false", ev[1].Detail)
		}
		// Its first update is the usual running touch; the keep-alive of two-phase is a touch too.
		jobapitest.WantUpdate(t, "first update", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
		jobapitest.WantUpdate(t, "pending on a legacy job", r.Put(t, job, stPending, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
		jobapitest.WantEvents(t, inst.Events(t, project, job.ID), "queued", "assigned")
	}

	t.Run("flag on, runner capable: waits for the ack", func(t *testing.T) {
		t.Parallel()
		tag := uniqueTag()
		r := taggedRunner(t, inst, tag, true)
		inst.CreatePipeline(t, on, []string{"test"}, jobDef("build", tag))
		job := take(t, r)
		j := inst.Job(t, on, job.ID)
		wantJob(t, j, stWaiting, "")
		if !j.TwoPhase || j.StartedAt != nil || ackKeyTTL(t, inst, job.ID) <= 0 {
			t.Fatalf("two-phase job: two_phase %v started_at %v, want waiting with a live key", j.TwoPhase, j.StartedAt)
		}
	})

	t.Run("flag on, runner without the feature: legacy", func(t *testing.T) {
		t.Parallel()
		tag := uniqueTag()
		r := taggedRunner(t, inst, tag, false)
		inst.CreatePipeline(t, on, []string{"test"}, jobDef("build", tag))
		legacy(t, inst, on, r, take(t, r))
	})

	t.Run("flag off for the project: legacy", func(t *testing.T) {
		t.Parallel()
		tag := uniqueTag()
		r := taggedRunner(t, inst, tag, true)
		inst.CreatePipeline(t, off, []string{"test"}, jobDef("build", tag))
		legacy(t, inst, off, r, take(t, r))
	})

	t.Run("flag per project", func(t *testing.T) {
		t.Parallel()
		tag := uniqueTag()
		r := taggedRunner(t, inst, tag, true)
		pOff := inst.CreatePipeline(t, off, []string{"test"}, jobDef("a", tag), jobDef("b", tag))
		pOn := inst.CreatePipeline(t, on, []string{"test"}, jobDef("a", tag), jobDef("b", tag))
		got := map[int64]string{}
		for range 4 {
			job := take(t, r)
			got[job.ID] = inst.Job(t, job.JobInfo.ProjectID, job.ID).Status
		}
		r.NoJob(t)
		for _, pj := range pOff.Jobs {
			if got[pj.ID] != stRunning {
				t.Errorf("project %d (flag off) job %d: %s, want running", off, pj.ID, got[pj.ID])
			}
		}
		for _, pj := range pOn.Jobs {
			if got[pj.ID] != stWaiting {
				t.Errorf("project %d (flag on) job %d: %s, want waiting_for_runner_ack", on, pj.ID, got[pj.ID])
			}
		}
	})

	t.Run("flag absent: legacy", func(t *testing.T) {
		t.Parallel()
		inst := jobapitest.Start(t, jobapitest.Options{})
		r := newRunner(t, inst.URL, runnerToken(t, inst), "s_noflag", true)
		inst.CreatePipeline(t, on, []string{"test"}, jobDef("build"))
		legacy(t, inst, on, r, take(t, r))
	})

	t.Run("flag turned off mid-wait: the build stays two-phase", func(t *testing.T) {
		t.Parallel()
		// The outcome is recorded at assignment and never re-evaluated (LIBRARY-NOTES).
		inst := jobapitest.Start(t, jobapitest.Options{})
		enableFlag(t, inst, on)
		inst.WaitFlags(t)
		r := newRunner(t, inst.URL, runnerToken(t, inst), "s_midwait", true)
		inst.CreatePipeline(t, on, []string{"test"}, jobDef("a"), jobDef("b"))
		job := take(t, r)
		inst.MustDo(t, http.StatusNoContent, "DELETE", "/api/v4/features/"+flagName, nil, nil)
		inst.WaitFlags(t)
		wantJob(t, inst.Job(t, on, job.ID), stWaiting, "")
		jobapitest.WantUpdate(t, "ack after the flag went off", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
		jobapitest.WantEvents(t, inst.Events(t, on, job.ID), "queued", "assigned", "acknowledged")
		next := take(t, r)
		wantJob(t, inst.Job(t, on, next.ID), stRunning, "") // the flag is off now
	})
}
