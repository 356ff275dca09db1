package runnertest_test

// The runner's hot path (builds.Service.updateFast and the jobCache branch of AppendTrace)
// answers an ack, a final update and a trace PATCH with one compare-and-set that carries the
// job token, and falls back to read-then-decide when the CAS matches nothing. These tests
// drive every fallback over two replicas: a, which hands out every job (so it caches the
// build at the claim and knows it runs after the ack), and b, which knows nothing until a
// request teaches it. The answers must not depend on which replica a runner reaches.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// fastPathEnv is one database served by two replicas.
type fastPathEnv struct {
	a, b    *jobapitest.Instance
	project int64
}

// startFastPath starts replica a and replica b, with two-phase on for the project (it
// applies only to runners that declare two_phase_job_commit).
func startFastPath(t *testing.T) *fastPathEnv {
	t.Helper()
	inst := jobapitest.Start(t, jobapitest.Options{})
	e := &fastPathEnv{a: inst, b: inst.Replica(t, jobapitest.Options{}), project: 21}
	inst.EnableTwoPhase(t, e.project) // waits long enough for b's provider too
	return e
}

// fpRunner is one runner manager, talking to replica a or b.
type fpRunner struct {
	a, b     *jobapitest.Runner
	systemID string
}

var fpSeq atomic.Int64

// assign creates a pipeline whose stage "test" holds job (named "build") and whose stage
// "deploy" holds "ship", both tagged for a new runner only, and has that runner take
// "build" on replica a. twoPhase is the runner's two_phase_job_commit capability.
func (e *fastPathEnv) assign(t *testing.T, twoPhase bool, job jobapitest.Job) (*fpRunner, *runnerclient.Job, api.Pipeline) {
	t.Helper()
	tag := fmt.Sprintf("fp%d", fpSeq.Add(1))
	_, token := e.a.CreateRunner(t, tag)
	client := func(inst *jobapitest.Instance) *jobapitest.Runner {
		c := jobapitest.NewRunner(t, inst.URL, token, "s_"+tag)
		c.Info.Features.TwoPhaseJobCommit = twoPhase
		return c
	}
	r := &fpRunner{a: client(e.a), b: client(e.b), systemID: "s_" + tag}
	if job == nil {
		job = jobapitest.Job{}
	}
	job["name"], job["stage"], job["script"], job["tags"] = "build", "test", []string{"echo build"}, []string{tag}
	p := e.a.CreatePipeline(t, e.project, []string{"test", "deploy"}, job,
		jobapitest.Job{"name": "ship", "stage": "deploy", "script": []string{"echo ship"}, "tags": []string{tag}})
	got, res, err := r.a.RequestJob(context.Background())
	if err != nil || res.Code != http.StatusCreated || got == nil {
		t.Fatalf("request job: %d %s %v, want 201", res.Code, res.Message, err)
	}
	want := "running"
	if twoPhase {
		want = "waiting_for_runner_ack"
	}
	if d := e.job(t, got.ID); d.Status != want {
		t.Fatalf("assigned job %d is %s, want %s", got.ID, d.Status, want)
	}
	return r, got, p
}

// running assigns a two-phase job and acknowledges it on replica a.
func (e *fastPathEnv) running(t *testing.T) (*fpRunner, *runnerclient.Job, api.Pipeline) {
	t.Helper()
	r, job, p := e.assign(t, true, nil)
	jobapitest.WantUpdate(t, "ack on a", r.a.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "running")
	return r, job, p
}

func (e *fastPathEnv) job(t *testing.T, id int64) api.JobDetail {
	t.Helper()
	return e.a.Job(t, e.project, id)
}

func (e *fastPathEnv) events(t *testing.T, id int64) []api.Event {
	t.Helper()
	return e.a.Events(t, e.project, id)
}

// trace reads the stored log through the operator API.
func (e *fastPathEnv) trace(t *testing.T, id int64) string {
	t.Helper()
	resp, b := e.a.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", e.project, id), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	return string(b)
}

// wantPatch checks the code, Range and Job-Status of a PATCH answer ("" skips a header).
func wantPatch(t testing.TB, what string, res runnerclient.PatchResult, code int, rng, jobStatus string) {
	t.Helper()
	if res.Code != code || (rng != "" && res.Range != rng) || (jobStatus != "" && res.JobStatus != jobStatus) {
		t.Fatalf("%s: %d Range %q Job-Status %q, want %d Range %q Job-Status %q",
			what, res.Code, res.Range, res.JobStatus, code, rng, jobStatus)
	}
}

// wantDetail checks a job's status, failure reason ("" for none) and exit code (nil for none).
func wantDetail(t testing.TB, d api.JobDetail, status, reason string, exitCode *int) {
	t.Helper()
	got := jobapitest.Reason(d)
	if d.Status != status || got != reason {
		t.Fatalf("job %d: %s reason %q, want %s reason %q", d.ID, d.Status, got, status, reason)
	}
	if (exitCode == nil) != (d.ExitCode == nil) || (exitCode != nil && int64(*exitCode) != *d.ExitCode) {
		t.Fatalf("job %d: exit_code %v, want %v", d.ID, d.ExitCode, exitCode)
	}
}

// forged is a well-formed job token that belongs to no build.
var forged = "glcbt-" + strings.Repeat("0", 40)

// nearMiss is token with its last character changed.
func nearMiss(token string) string {
	last := byte('a')
	if strings.HasSuffix(token, "a") {
		last = 'b'
	}
	return token[:len(token)-1] + string(last)
}

func TestFastPathAck(t *testing.T) {
	t.Parallel()
	e := startFastPath(t)

	t.Run("wrong token is 403 and the build waits; the right one acks once", func(t *testing.T) {
		t.Parallel()
		r, job, _ := e.assign(t, true, nil)
		_, other, _ := e.assign(t, true, nil)
		for name, tok := range map[string]string{"another waiting job's token": other.Token, "forged": forged} {
			bad := &runnerclient.Job{ID: job.ID, Token: tok}
			jobapitest.WantUpdate(t, name+" on a", r.a.Put(t, bad, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, "")
			jobapitest.WantUpdate(t, name+" on b", r.b.Put(t, bad, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, "")
		}
		d := e.job(t, job.ID)
		if d.Status != "waiting_for_runner_ack" || d.StartedAt != nil {
			t.Fatalf("after wrong-token acks: %s started_at %v, want still waiting", d.Status, d.StartedAt)
		}
		jobapitest.WantEvents(t, e.events(t, job.ID), "queued", "assigned")
		// The other job was not acknowledged by its token being tried on this one.
		if d := e.job(t, other.ID); d.Status != "waiting_for_runner_ack" {
			t.Fatalf("other job %s, want waiting", d.Status)
		}

		res := r.a.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		jobapitest.WantUpdate(t, "ack with the right token", res, http.StatusOK, "running")
		if res.State != runnerclient.UpdateSucceeded || res.CancelRequested {
			t.Fatalf("ack: runner reads %v cancel=%v", res.State, res.CancelRequested)
		}
		d = e.job(t, job.ID)
		wantDetail(t, d, "running", "", nil)
		if d.StartedAt == nil || d.Ack != nil {
			t.Fatalf("acked job: started_at %v ack %+v, want started and no ack", d.StartedAt, d.Ack)
		}
		ev := e.events(t, job.ID)
		jobapitest.WantEvents(t, ev, "queued", "assigned", "acknowledged")
		ack := ev[2]
		lat, ok := ack.Detail["assign_to_ack_seconds"].(float64)
		if !ok || lat < 0 || lat > 30 {
			t.Fatalf("acknowledged detail %v, want assign_to_ack_seconds in [0, 30]", ack.Detail)
		}
		if ack.RunnerManager != r.systemID {
			t.Fatalf("acknowledged by %q, want %q", ack.RunnerManager, r.systemID)
		}
		// The ack key is released (SPEC §4: ack key deleted).
		key := fmt.Sprintf("%sack:{%d}", e.a.Config.RedisKeyPrefix, job.ID)
		if ttl, err := e.a.Redis.PTTL(context.Background(), key).Result(); err != nil || ttl != -2 {
			t.Fatalf("ack key %s after the ack: PTTL %v %v, want gone", key, ttl, err)
		}
		// A wrong token after the ack is still 403 on either replica (a now knows it runs).
		bad := &runnerclient.Job{ID: job.ID, Token: other.Token}
		jobapitest.WantUpdate(t, "wrong token after the ack on a", r.a.Put(t, bad, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, "")
		jobapitest.WantUpdate(t, "wrong token after the ack on b", r.b.Put(t, bad, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusForbidden, "")
		if n := len(jobapitest.EventsOf(e.events(t, job.ID), "acknowledged")); n != 1 {
			t.Fatalf("%d acknowledged events, want 1", n)
		}
	})

	// A runner retries the ack when the answer was lost; the retry may reach any replica.
	for _, order := range []string{"ab", "ba"} {
		t.Run("repeated ack is 200 once acknowledged, first on "+order[:1], func(t *testing.T) {
			t.Parallel()
			r, job, _ := e.assign(t, true, nil)
			on := map[byte]*jobapitest.Runner{'a': r.a, 'b': r.b}
			var started *time.Time
			for i, rep := range []byte(order + order) {
				res := on[rep].Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
				jobapitest.WantUpdate(t, fmt.Sprintf("ack #%d on %c", i+1, rep), res, http.StatusOK, "running")
				d := e.job(t, job.ID)
				wantDetail(t, d, "running", "", nil)
				if started == nil {
					started = d.StartedAt
				} else if d.StartedAt == nil || !d.StartedAt.Equal(*started) {
					t.Fatalf("ack #%d moved started_at %v → %v", i+1, started, d.StartedAt)
				}
			}
			jobapitest.WantEvents(t, e.events(t, job.ID), "queued", "assigned", "acknowledged")
		})
	}

	// gitlab-runner's keep-alive is PUT state=running (with output); on a running build it
	// is a touch, wherever it lands.
	keepalive := func(t *testing.T, r *fpRunner, job *runnerclient.Job, history ...string) {
		t.Helper()
		before := e.job(t, job.ID)
		opts := runnerclient.UpdateOptions{Checksum: "crc32:00000000"}
		for i, c := range []*jobapitest.Runner{r.a, r.a, r.b, r.b, r.a} {
			jobapitest.WantUpdate(t, fmt.Sprintf("keep-alive #%d", i+1), c.Put(t, job, runnerclient.StateRunning, opts), http.StatusOK, "running")
		}
		after := e.job(t, job.ID)
		wantDetail(t, after, "running", "", nil)
		if before.StartedAt == nil || after.StartedAt == nil || !after.StartedAt.Equal(*before.StartedAt) {
			t.Fatalf("keep-alives moved started_at %v → %v", before.StartedAt, after.StartedAt)
		}
		jobapitest.WantEvents(t, e.events(t, job.ID), history...)
		// A forged token on the same path is still refused.
		bad := &runnerclient.Job{ID: job.ID, Token: forged}
		jobapitest.WantUpdate(t, "forged keep-alive on a", r.a.Put(t, bad, runnerclient.StateRunning, opts), http.StatusForbidden, "")
		jobapitest.WantUpdate(t, "forged keep-alive on b", r.b.Put(t, bad, runnerclient.StateRunning, opts), http.StatusForbidden, "")
	}
	t.Run("keep-alive on a legacy running build, on both replicas", func(t *testing.T) {
		t.Parallel()
		r, job, _ := e.assign(t, false, nil)
		keepalive(t, r, job, "queued", "assigned")
	})
	t.Run("keep-alive on an acknowledged build, on both replicas", func(t *testing.T) {
		t.Parallel()
		r, job, _ := e.running(t)
		keepalive(t, r, job, "queued", "assigned", "acknowledged")
	})
}

func TestFastPathFinalUpdate(t *testing.T) {
	t.Parallel()
	e := startFastPath(t)

	// twoPhase: acked on a first; on: the replica that receives the final update.
	for _, tc := range []struct {
		name     string
		twoPhase bool
		on       string
	}{
		{"two-phase, final on a", true, "a"},
		{"two-phase, final on b", true, "b"},
		{"legacy, final on b", false, "b"},
	} {
		t.Run("success: wrong token 403, then final, repeat 200; "+tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				r   *fpRunner
				job *runnerclient.Job
				p   api.Pipeline
			)
			if tc.twoPhase {
				r, job, p = e.running(t)
			} else {
				r, job, p = e.assign(t, false, nil)
			}
			final, other := r.a, r.b
			if tc.on == "b" {
				final, other = r.b, r.a
			}
			opts := runnerclient.UpdateOptions{Checksum: "crc32:00000000"}
			for _, c := range []*jobapitest.Runner{r.a, r.b} {
				bad := &runnerclient.Job{ID: job.ID, Token: forged}
				jobapitest.WantUpdate(t, "forged success", c.Put(t, bad, runnerclient.StateSuccess, opts), http.StatusForbidden, "")
				bad.Token = nearMiss(job.Token)
				jobapitest.WantUpdate(t, "near-miss token", c.Put(t, bad, runnerclient.StateSuccess, opts), http.StatusForbidden, "")
			}
			wantDetail(t, e.job(t, job.ID), "running", "", nil)

			jobapitest.WantUpdate(t, "success", final.Put(t, job, runnerclient.StateSuccess, opts), http.StatusOK, "success")
			d := e.job(t, job.ID)
			wantDetail(t, d, "success", "", nil)
			if d.FinishedAt == nil || d.RetriedBy != nil {
				t.Fatalf("finished job: finished_at %v retried_by %v", d.FinishedAt, d.RetriedBy)
			}
			// The answer was lost: the runner sends it again, maybe to the other replica.
			jobapitest.WantUpdate(t, "success again", final.Put(t, job, runnerclient.StateSuccess, opts), http.StatusOK, "success")
			jobapitest.WantUpdate(t, "success again elsewhere", other.Put(t, job, runnerclient.StateSuccess, opts), http.StatusOK, "success")
			// Anything else is refused with the end state, on both.
			for _, c := range []*jobapitest.Runner{r.a, r.b} {
				jobapitest.WantUpdate(t, "running after success", c.Put(t, job, runnerclient.StateRunning, opts), http.StatusForbidden, "success")
				jobapitest.WantUpdate(t, "failed after success", c.Put(t, job, runnerclient.StateFailed,
					runnerclient.UpdateOptions{FailureReason: "script_failure"}), http.StatusForbidden, "success")
			}
			ev := e.events(t, job.ID)
			if n := len(jobapitest.EventsOf(ev, "finished")); n != 1 {
				t.Fatalf("%d finished events in %s, want 1", n, jobapitest.EventTypes(ev))
			}
			fin := ev[len(ev)-1]
			if fin.Type != "finished" || fin.RunnerManager != r.systemID || fin.Detail["status"] != "success" {
				t.Fatalf("last event %+v, want finished by %s with status success", fin, r.systemID)
			}
			if n := len(jobapitest.EventsOf(ev, "acknowledged")); (n == 1) != tc.twoPhase {
				t.Fatalf("%d acknowledged events in %s", n, jobapitest.EventTypes(ev))
			}
			// The finish advanced the pipeline in the same transaction.
			if got := jobapitest.JobStatuses(e.a.Pipeline(t, p)); got["build"] != "success" || got["ship"] != "pending" {
				t.Fatalf("pipeline jobs %v, want build success and ship pending", got)
			}
		})
	}

	for _, on := range []string{"a", "b"} {
		t.Run("failed with script_failure, final on "+on, func(t *testing.T) {
			t.Parallel()
			r, job, p := e.running(t)
			final, other := r.a, r.b
			if on == "b" {
				final, other = r.b, r.a
			}
			opts := runnerclient.UpdateOptions{FailureReason: "script_failure", ExitCode: 2, Checksum: "crc32:00000000"}
			jobapitest.WantUpdate(t, "failed with a forged token", final.Put(t, &runnerclient.Job{ID: job.ID, Token: forged},
				runnerclient.StateFailed, opts), http.StatusForbidden, "")
			wantDetail(t, e.job(t, job.ID), "running", "", nil)
			jobapitest.WantUpdate(t, "failed", final.Put(t, job, runnerclient.StateFailed, opts), http.StatusOK, "failed")
			two := 2
			d := e.job(t, job.ID)
			wantDetail(t, d, "failed", "script_failure", &two)
			if d.RetriedBy != nil {
				t.Fatalf("script failure without a retry rule was retried by %d", *d.RetriedBy)
			}
			jobapitest.WantUpdate(t, "failed again", final.Put(t, job, runnerclient.StateFailed, opts), http.StatusOK, "failed")
			jobapitest.WantUpdate(t, "failed again elsewhere", other.Put(t, job, runnerclient.StateFailed, opts), http.StatusOK, "failed")
			jobapitest.WantUpdate(t, "success after failed", other.Put(t, job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}), http.StatusForbidden, "failed")
			ev := e.events(t, job.ID)
			jobapitest.WantEvents(t, ev, "queued", "assigned", "acknowledged", "finished")
			if dt := ev[3].Detail; dt["status"] != "failed" || dt["failure_reason"] != "script_failure" || dt["exit_code"] != float64(2) {
				t.Fatalf("finished detail %v", dt)
			}
			if got := e.a.Pipeline(t, p); got.Status != "failed" || jobapitest.JobStatuses(got)["ship"] != "skipped" {
				t.Fatalf("pipeline %s jobs %v, want failed with ship skipped", got.Status, jobapitest.JobStatuses(got))
			}
		})
	}

	// SPEC §4: running with cancel requested answers canceling; the runner's final update
	// then ends the build canceled (TestCancelJob and twophase's PUT table expect the same).
	for _, tc := range []struct {
		name, on, state, reason string
	}{
		{"failed/job_canceled on a", "a", runnerclient.StateFailed, "job_canceled"},
		{"failed/job_canceled on b", "b", runnerclient.StateFailed, "job_canceled"},
		{"success on b (the script ended before the cancel)", "b", runnerclient.StateSuccess, ""},
	} {
		t.Run("canceling ends canceled: "+tc.name, func(t *testing.T) {
			t.Parallel()
			r, job, p := e.running(t)
			var d api.JobDetail
			e.a.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/cancel", e.project, job.ID), nil, &d)
			if d.Status != "canceling" {
				t.Fatalf("cancel of a running job: %s, want canceling", d.Status)
			}
			for name, c := range map[string]*jobapitest.Runner{"a": r.a, "b": r.b} {
				res := c.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
				jobapitest.WantUpdate(t, "keep-alive while canceling on "+name, res, http.StatusOK, "canceling")
				if !res.CancelRequested {
					t.Fatalf("keep-alive on %s: the runner does not see the cancel", name)
				}
			}
			final, other := r.a, r.b
			if tc.on == "b" {
				final, other = r.b, r.a
			}
			opts := runnerclient.UpdateOptions{FailureReason: tc.reason}
			jobapitest.WantUpdate(t, "final with a forged token", final.Put(t, &runnerclient.Job{ID: job.ID, Token: forged}, tc.state, opts),
				http.StatusForbidden, "")
			if d := e.job(t, job.ID); d.Status != "canceling" {
				t.Fatalf("forged final changed the job to %s", d.Status)
			}
			jobapitest.WantUpdate(t, "final while canceling", final.Put(t, job, tc.state, opts), http.StatusOK, "canceled")
			wantDetail(t, e.job(t, job.ID), "canceled", "", nil)
			jobapitest.WantUpdate(t, "final again", final.Put(t, job, tc.state, opts), http.StatusOK, "canceled")
			jobapitest.WantUpdate(t, "final again elsewhere", other.Put(t, job, tc.state, opts), http.StatusOK, "canceled")
			jobapitest.WantUpdate(t, "keep-alive after canceled", other.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}),
				http.StatusForbidden, "canceled")
			// a cached the build at the claim; the finish may have run on b: both refuse.
			for name, c := range map[string]*jobapitest.Runner{"a": r.a, "b": r.b} {
				res := c.Patch(t, job, 0, "late\n")
				wantPatch(t, "trace after canceled on "+name, res, http.StatusForbidden, "", "canceled")
			}
			ev := e.events(t, job.ID)
			if n := len(jobapitest.EventsOf(ev, "finished")); n != 1 || len(jobapitest.EventsOf(ev, "cancel_requested")) != 1 || ev[len(ev)-1].Type != "finished" {
				t.Fatalf("events %s, want one cancel_requested then one finished", jobapitest.EventTypes(ev))
			}
			if got := e.a.Pipeline(t, p); got.Status != "canceled" || jobapitest.JobStatuses(got)["ship"] != "skipped" {
				t.Fatalf("pipeline %s jobs %v, want canceled with ship skipped", got.Status, jobapitest.JobStatuses(got))
			}
		})
	}
}

func TestFastPathTrace(t *testing.T) {
	t.Parallel()
	e := startFastPath(t)
	const secret = "hunter2-deploy-key" // masked variables need >= 8 characters
	r, job, _ := e.assign(t, true, jobapitest.Job{"variables": map[string]any{
		"DEPLOY_KEY": map[string]any{"value": secret, "masked": true},
		"PLAIN":      "visible-value",
	}})
	_, other, _ := e.assign(t, true, nil)

	// Before the ack the build is not on a runner: a's cache knows it (claim), but the
	// append's compare-and-set refuses; b reads it. Both say why.
	wantPatch(t, "PATCH before the ack on a", r.a.Patch(t, job, 0, "early\n"), http.StatusForbidden, "", "waiting_for_runner_ack")
	wantPatch(t, "PATCH before the ack on b", r.b.Patch(t, job, 0, "early\n"), http.StatusForbidden, "", "waiting_for_runner_ack")
	jobapitest.WantUpdate(t, "ack", r.a.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "running")

	// A runner that does not mask (gitlab-runner does; this is the server's second line).
	var sent, want strings.Builder
	appendOn := func(name string, c *jobapitest.Runner, chunk string) {
		t.Helper()
		res := c.Patch(t, job, sent.Len(), chunk)
		end := sent.Len() + len(chunk)
		wantPatch(t, "PATCH on "+name, res, http.StatusAccepted, fmt.Sprintf("0-%d", end), "running")
		if res.State != runnerclient.PatchSucceeded || res.Offset != end {
			t.Fatalf("PATCH on %s: runner reads %v offset %d, want succeeded at %d", name, res.State, res.Offset, end)
		}
		sent.WriteString(chunk)
		want.WriteString(strings.ReplaceAll(chunk, secret, strings.Repeat("x", len(secret))))
	}
	appendOn("a (cached at the claim)", r.a, "$ echo $DEPLOY_KEY\n"+secret+"\n")
	appendOn("b (not cached)", r.b, "b sees "+secret+" and PLAIN=visible-value\n")
	appendOn("b (cached by its first PATCH)", r.b, "twice: "+secret+secret+"\n")
	appendOn("a again", r.a, "a: "+secret+" done\n")
	size := sent.Len()
	if got := e.trace(t, job.ID); got != want.String() || strings.Contains(got, secret) {
		t.Fatalf("stored trace %q, want %q", got, want.String())
	}
	if !strings.Contains(want.String(), "visible-value") {
		t.Fatal("test bug: the unmasked variable should be in the trace")
	}

	// Wrong tokens, on a build both replicas have cached: 403, nothing appended.
	for name, tok := range map[string]string{"forged": forged, "another running job's": other.Token, "none": ""} {
		bad := &runnerclient.Job{ID: job.ID, Token: tok}
		for rep, c := range map[string]*jobapitest.Runner{"a": r.a, "b": r.b} {
			res := c.Patch(t, bad, size, "forged line\n")
			wantPatch(t, name+" token on "+rep, res, http.StatusForbidden, "", "")
		}
	}
	// Wrong offsets: 416 with the stored length, whichever replica.
	for _, off := range []int{0, size - 1, size + 1, size + 1000} {
		for rep, c := range map[string]*jobapitest.Runner{"a": r.a, "b": r.b} {
			res := c.Patch(t, job, off, "misplaced\n")
			wantPatch(t, fmt.Sprintf("offset %d on %s", off, rep), res, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("0-%d", size), "")
			if res.State != runnerclient.PatchRangeMismatch || res.Offset != size {
				t.Fatalf("offset %d on %s: runner reads %v offset %d, want range mismatch at %d", off, rep, res.State, res.Offset, size)
			}
		}
	}
	if d := e.job(t, job.ID); d.TraceSize != int64(size) {
		t.Fatalf("trace_size %d after refused PATCHes, want %d", d.TraceSize, size)
	}
	if got := e.trace(t, job.ID); got != want.String() {
		t.Fatalf("refused PATCHes changed the trace: %q", got)
	}

	// Finished from b: a still has the build cached, its CAS must refuse and say why.
	jobapitest.WantUpdate(t, "success on b", r.b.Put(t, job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}), http.StatusOK, "success")
	for rep, c := range map[string]*jobapitest.Runner{"a": r.a, "b": r.b} {
		res := c.Patch(t, job, size, "after the end\n")
		wantPatch(t, "PATCH after success on "+rep, res, http.StatusForbidden, "", "success")
		if res.State != runnerclient.PatchAbort {
			t.Fatalf("PATCH after success on %s: runner reads %v, want abort", rep, res.State)
		}
	}
	if d := e.job(t, job.ID); d.TraceSize != int64(size) || d.Status != "success" {
		t.Fatalf("after late PATCHes: %s trace_size %d, want success %d", d.Status, d.TraceSize, size)
	}
	if got := e.trace(t, job.ID); got != want.String() {
		t.Fatalf("late PATCHes changed the trace: %q", got)
	}
}

// TestFastPathRaces sends the same update many times at once over both replicas: the
// compare-and-set lets one through and every other request answers from the winner's
// result, so the runner always hears the truth and no event is written twice.
func TestFastPathRaces(t *testing.T) {
	t.Parallel()
	e := startFastPath(t)
	const senders, rounds = 8, 5

	// race sends state from senders goroutines (even ones on a, odd ones on b) at once.
	race := func(t *testing.T, r *fpRunner, job *runnerclient.Job, state string) []runnerclient.UpdateResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out := make([]runnerclient.UpdateResult, senders)
		errs := make([]error, senders)
		begin := make(chan struct{})
		var wg sync.WaitGroup
		for i := range senders {
			c := r.a
			if i%2 == 1 {
				c = r.b
			}
			wg.Go(func() {
				<-begin
				out[i], errs[i] = c.UpdateJob(ctx, job, state, runnerclient.UpdateOptions{})
			})
		}
		close(begin)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("sender %d: %v", i, err)
			}
		}
		return out
	}

	t.Run("acks", func(t *testing.T) {
		t.Parallel()
		for round := range rounds {
			r, job, _ := e.assign(t, true, nil)
			for i, res := range race(t, r, job, runnerclient.StateRunning) {
				if res.Code != http.StatusOK || res.JobStatus != "running" || res.State != runnerclient.UpdateSucceeded {
					t.Errorf("round %d sender %d: %d Job-Status %q (%v), want 200 running", round, i, res.Code, res.JobStatus, res.State)
				}
			}
			wantDetail(t, e.job(t, job.ID), "running", "", nil)
			jobapitest.WantEvents(t, e.events(t, job.ID), "queued", "assigned", "acknowledged")
		}
	})

	t.Run("final updates", func(t *testing.T) {
		t.Parallel()
		for round := range rounds {
			r, job, p := e.running(t)
			for i, res := range race(t, r, job, runnerclient.StateSuccess) {
				if res.Code != http.StatusOK || res.JobStatus != "success" {
					t.Errorf("round %d sender %d: %d Job-Status %q, want 200 success", round, i, res.Code, res.JobStatus)
				}
			}
			wantDetail(t, e.job(t, job.ID), "success", "", nil)
			jobapitest.WantEvents(t, e.events(t, job.ID), "queued", "assigned", "acknowledged", "finished")
			if got := jobapitest.JobStatuses(e.a.Pipeline(t, p)); got["ship"] != "pending" {
				t.Fatalf("pipeline jobs %v, want ship pending once", got)
			}
		}
	})
}
