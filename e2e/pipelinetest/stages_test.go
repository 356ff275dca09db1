package pipelinetest_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// statusLog records the pipeline statuses a test observed, without repeats.
type statusLog []string

func (s *statusLog) add(st string) {
	if n := len(*s); n == 0 || (*s)[n-1] != st {
		*s = append(*s, st)
	}
}

func (s statusLog) want(t *testing.T, want ...string) {
	t.Helper()
	if !slices.Equal(s, want) {
		t.Errorf("pipeline went through %v, want %v", []string(s), want)
	}
}

// TestStageAdvancement: the next stage is released only once every latest attempt of the
// current one finished, a failure with allow_failure does not block, and the pipeline goes
// pending → running → success.
func TestStageAdvancement(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 1, "", []string{"build", "test", "deploy"},
		job{"name": "compile", "stage": "build", "script": "make"},
		job{"name": "lint", "stage": "build", "script": "lint", "allow_failure": true},
		job{"name": "unit", "stage": "test", "script": "go test"},
		job{"name": "docs", "stage": "test", "script": "docs", "allow_failure": true},
		job{"name": "ship", "stage": "deploy", "script": "ship"})
	var seen statusLog
	step := func(status string, jobs map[string]string) api.Pipeline {
		t.Helper()
		got := expect(t, inst, p, status, jobs)
		seen.add(got.Status)
		return got
	}
	step("pending", map[string]string{"compile": "pending", "lint": "pending", "unit": "created", "docs": "created", "ship": "created"})

	compile := r.TakeNamed(t, "compile")
	step("running", map[string]string{"compile": "running", "lint": "pending", "unit": "created"})
	lint := r.TakeNamed(t, "lint")
	r.Finish(t, compile, runnerclient.StateSuccess, "")
	// lint is still running: the test stage waits for it.
	step("running", map[string]string{"compile": "success", "lint": "running", "unit": "created", "docs": "created"})
	r.NoJob(t)
	r.Finish(t, lint, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
	step("running", map[string]string{"lint": "failed", "unit": "pending", "docs": "pending", "ship": "created"})

	unit := r.TakeNamed(t, "unit")
	docs := r.TakeNamed(t, "docs")
	r.Finish(t, docs, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
	step("running", map[string]string{"unit": "running", "docs": "failed", "ship": "created"})
	r.NoJob(t)
	r.Finish(t, unit, runnerclient.StateSuccess, "")
	step("running", map[string]string{"unit": "success", "ship": "pending"})
	ship := r.TakeNamed(t, "ship")
	r.Finish(t, ship, runnerclient.StateSuccess, "")
	got := step("success", map[string]string{"compile": "success", "lint": "failed", "unit": "success", "docs": "failed", "ship": "success"})
	seen.want(t, "pending", "running", "success")

	w := callWait(inst.URL, p.ProjectID, p.ID, 0)
	if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 || len(w.res.Finished) != len(got.Jobs) {
		t.Fatalf("wait after the end: %+v %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
}

// TestStageFailure: a failure without allow_failure skips the later stages once its own
// stage has finished and fails the pipeline; an operator retry of the failed job reopens the
// skipped builds and the pipeline runs to success.
func TestStageFailureAndOperatorRetry(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 2, "", []string{"build", "test", "deploy"},
		job{"name": "compile", "stage": "build", "script": "make"},
		job{"name": "vet", "stage": "build", "script": "vet"},
		job{"name": "unit", "stage": "test", "script": "go test"},
		job{"name": "ship", "stage": "deploy", "script": "ship"})
	var seen statusLog
	step := func(status string, jobs map[string]string) api.Pipeline {
		t.Helper()
		got := expect(t, inst, p, status, jobs)
		seen.add(got.Status)
		return got
	}
	step("pending", nil)
	compile := r.TakeNamed(t, "compile")
	vet := r.TakeNamed(t, "vet")
	r.Finish(t, compile, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
	// vet still runs: nothing is decided for later stages yet.
	step("running", map[string]string{"compile": "failed", "vet": "running", "unit": "created", "ship": "created"})
	r.NoJob(t)
	r.Finish(t, vet, runnerclient.StateSuccess, "")
	failed := step("failed", map[string]string{"compile": "failed", "vet": "success", "unit": "skipped", "ship": "skipped"})
	for _, name := range []string{"unit", "ship"} {
		if ev := eventsOf(t, inst, p.ProjectID, jobapitest.JobID(t, failed, name), "skipped"); len(ev) != 1 {
			t.Errorf("job %s: %d skipped events, want 1", name, len(ev))
		}
	}
	if d := inst.Job(t, p.ProjectID, compile.ID); jobapitest.Reason(d) != "script_failure" || d.RetriedBy != nil {
		t.Errorf("compile: reason %q retried_by %v, want script_failure and no automatic retry", jobapitest.Reason(d), d.RetriedBy)
	}
	w := callWait(inst.URL, p.ProjectID, p.ID, 5)
	if w.err != nil || w.res.Status != "failed" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 4 || w.took > time.Second {
		t.Fatalf("wait on the failed pipeline: %+v after %v, %v", w.res, w.took, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
	r.NoJob(t)

	// The operator retries the failed job.
	var retried api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/retry", p.ProjectID, compile.ID), nil, &retried)
	if retried.Attempt != 2 || retried.RetryOf == nil || *retried.RetryOf != compile.ID || retried.Status != "pending" {
		t.Fatalf("operator retry answered %+v", retried)
	}
	reopened := step("running", map[string]string{"compile": "pending", "vet": "success", "unit": "created", "ship": "created"})
	if reopened.FinishedAt != nil {
		t.Errorf("reopened pipeline keeps finished_at %v", reopened.FinishedAt)
	}
	for _, name := range []string{"unit", "ship"} {
		if ev := eventsOf(t, inst, p.ProjectID, jobapitest.JobID(t, reopened, name), "reopened"); len(ev) != 1 {
			t.Errorf("job %s: %d reopened events, want 1", name, len(ev))
		}
	}
	w = callWait(inst.URL, p.ProjectID, p.ID, 0)
	if w.err != nil || w.res.Status != "running" || w.res.JobsRemaining != 3 {
		t.Fatalf("wait after the retry: %+v, %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res) // compile#1 and vet only: unit and ship are open again

	compile2 := r.TakeNamed(t, "compile")
	if compile2.ID != retried.ID {
		t.Fatalf("runner got compile %d, want the retry %d", compile2.ID, retried.ID)
	}
	r.Finish(t, compile2, runnerclient.StateSuccess, "")
	step("running", map[string]string{"compile": "success", "unit": "pending", "ship": "created"})
	unit := r.TakeNamed(t, "unit")
	r.Finish(t, unit, runnerclient.StateSuccess, "")
	ship := r.TakeNamed(t, "ship")
	r.Finish(t, ship, runnerclient.StateSuccess, "")
	step("success", map[string]string{"compile": "success", "vet": "success", "unit": "success", "ship": "success"})
	seen.want(t, "pending", "running", "failed", "running", "success")
	w = callWait(inst.URL, p.ProjectID, p.ID, 0)
	if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 5 {
		t.Fatalf("final wait: %+v, %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
}

// TestRetryOfEarlierStageThatFails: an operator retries a job of a stage that already
// succeeded while a later stage runs; the retry fails. The builds of the stages not yet
// released must be skipped and the pipeline must fail, not stay unfinished forever.
func TestRetryOfEarlierStageThatFails(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 3, "", []string{"build", "test", "deploy"},
		job{"name": "compile", "stage": "build", "script": "make"},
		job{"name": "unit", "stage": "test", "script": "go test"},
		job{"name": "ship", "stage": "deploy", "script": "ship"})
	compile := r.TakeNamed(t, "compile")
	r.Finish(t, compile, runnerclient.StateSuccess, "")
	unit := r.TakeNamed(t, "unit")
	var retried api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/retry", p.ProjectID, compile.ID), nil, &retried)
	r.Finish(t, unit, runnerclient.StateSuccess, "")
	// The build stage is open again: deploy waits for it.
	expect(t, inst, p, "running", map[string]string{"compile": "pending", "unit": "success", "ship": "created"})
	compile2 := r.TakeNamed(t, "compile")
	r.Finish(t, compile2, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
	expect(t, inst, p, "failed", map[string]string{"compile": "failed", "unit": "success", "ship": "skipped"})
	w := callWait(inst.URL, p.ProjectID, p.ID, 1)
	if w.err != nil || w.res.Status != "failed" || w.res.JobsRemaining != 0 {
		t.Fatalf("wait: %+v, %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
}

// TestAutoRetry: a job with `retry: 1` failing with script_failure is retried in place (the
// next stage waits for the retry); the pipeline succeeds when the retry does. A job whose
// retry rule does not name the reason, or whose retries are used up, blocks the pipeline.
func TestAutoRetry(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)

	t.Run("retry succeeds", func(t *testing.T) {
		p := createPipeline(t, inst, 4, "", []string{"build", "test"},
			job{"name": "flaky", "stage": "build", "script": "flaky", "retry": 1},
			job{"name": "other", "stage": "build", "script": "other"},
			job{"name": "unit", "stage": "test", "script": "go test"})
		var seen statusLog
		step := func(status string, jobs map[string]string) api.Pipeline {
			t.Helper()
			got := expect(t, inst, p, status, jobs)
			seen.add(got.Status)
			return got
		}
		step("pending", nil)
		flaky := r.TakeNamed(t, "flaky")
		other := r.TakeNamed(t, "other")
		r.Finish(t, flaky, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
		got := step("running", map[string]string{"flaky": "pending", "other": "running", "unit": "created"})
		var first, second *api.PipelineJob
		for i, j := range got.Jobs {
			if j.Name == "flaky" && j.Attempt == 1 {
				first = &got.Jobs[i]
			}
			if j.Name == "flaky" && j.Attempt == 2 {
				second = &got.Jobs[i]
			}
		}
		if first == nil || second == nil || first.Status != "failed" || first.RetriedBy == nil || *first.RetriedBy != second.ID ||
			second.RetryOf == nil || *second.RetryOf != first.ID {
			t.Fatalf("flaky attempts: %+v / %+v", first, second)
		}
		if ev := eventsOf(t, inst, p.ProjectID, first.ID, "retried"); len(ev) != 1 || ev[0].Detail["new_id"] != float64(second.ID) {
			t.Errorf("flaky#1 retried events %+v, want one naming %d", ev, second.ID)
		}
		r.Finish(t, other, runnerclient.StateSuccess, "")
		// Only the retry is left in the build stage: unit still waits.
		step("running", map[string]string{"flaky": "pending", "other": "success", "unit": "created"})
		flaky2 := r.TakeNamed(t, "flaky")
		if flaky2.ID != second.ID {
			t.Fatalf("runner got flaky %d, want the retry %d", flaky2.ID, second.ID)
		}
		r.Finish(t, flaky2, runnerclient.StateSuccess, "")
		step("running", map[string]string{"flaky": "success", "unit": "pending"})
		unit := r.TakeNamed(t, "unit")
		r.Finish(t, unit, runnerclient.StateSuccess, "")
		step("success", map[string]string{"flaky": "success", "other": "success", "unit": "success"})
		seen.want(t, "pending", "running", "success")
		w := callWait(inst.URL, p.ProjectID, p.ID, 0)
		if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 4 {
			t.Fatalf("wait: %+v, %v", w.res, w.err)
		}
		checkWaitAnswer(t, inst, p.ID, w.res) // the failed first attempt is finished too
	})

	t.Run("retries exhausted or not covered", func(t *testing.T) {
		p := createPipeline(t, inst, 5, "", []string{"build", "test"},
			job{"name": "once", "stage": "build", "script": "x", "retry": 1},
			job{"name": "picky", "stage": "build", "script": "x", "retry": map[string]any{"max": 2, "when": []string{"runner_system_failure"}}},
			job{"name": "unit", "stage": "test", "script": "go test"})
		once := r.TakeNamed(t, "once")
		picky := r.TakeNamed(t, "picky")
		r.Finish(t, picky, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
		r.Finish(t, once, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
		expect(t, inst, p, "running", map[string]string{"once": "pending", "picky": "failed", "unit": "created"})
		once2 := r.TakeNamed(t, "once")
		r.Finish(t, once2, runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
		got := expect(t, inst, p, "failed", map[string]string{"once": "failed", "picky": "failed", "unit": "skipped"})
		if len(got.Jobs) != 4 {
			t.Errorf("pipeline has %d builds, want 4 (once twice, picky once, unit)", len(got.Jobs))
		}
		if d := inst.Job(t, p.ProjectID, picky.ID); d.RetriedBy != nil {
			t.Errorf("picky was retried for a reason its rule does not name")
		}
		if ev := eventsOf(t, inst, p.ProjectID, once2.ID, "retry_exhausted"); len(ev) != 1 {
			t.Errorf("once#2: %d retry_exhausted events, want 1", len(ev))
		}
	})
}

// TestCancelPipeline: canceling cancels what no runner holds at once and asks the runner of
// a running build to stop; the pipeline ends canceled and a waiter learns it promptly.
func TestCancelPipeline(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	eventsSubscribed(t, inst, 1)

	t.Run("running build goes through canceling", func(t *testing.T) {
		p := createPipeline(t, inst, 6, "", []string{"build", "test"},
			job{"name": "a", "stage": "build", "script": "x"},
			job{"name": "b", "stage": "build", "script": "x", "tags": []string{"elsewhere"}},
			job{"name": "c", "stage": "test", "script": "x"})
		a := r.TakeNamed(t, "a")
		waited := make(chan waitCall, 1)
		go func() { waited <- callWait(inst.URL, p.ProjectID, p.ID, 30) }()
		var got api.Pipeline
		inst.MustDo(t, http.StatusOK, "POST", jobapitest.PipelinePath(p.ProjectID, p.ID)+"/cancel", nil, &got)
		if st := jobapitest.Latest(got); got.Status != "running" || st["a"].Status != "canceling" || st["b"].Status != "canceled" || st["c"].Status != "canceled" {
			t.Fatalf("after cancel: %s %+v", got.Status, got.Jobs)
		}
		u, err := r.UpdateJob(t.Context(), a, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if err != nil || u.Code != http.StatusOK || !u.CancelRequested {
			t.Fatalf("runner of a: %d Job-Status %q, want 200 canceling", u.Code, u.JobStatus)
		}
		select {
		case w := <-waited:
			t.Fatalf("waiter returned while a is still canceling: %+v", w)
		case <-time.After(100 * time.Millisecond):
		}
		sent := time.Now()
		r.Finish(t, a, runnerclient.StateFailed, runnerclient.ReasonJobCanceled)
		w := <-waited
		if w.err != nil || w.res.Status != "canceled" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 3 {
			t.Fatalf("wait: %+v, %v", w.res, w.err)
		}
		t.Logf("waiter answered %v after the final update of the canceled job", w.at.Sub(sent))
		if lat := w.at.Sub(sent); lat > time.Second {
			t.Errorf("waiter answered %v after the last build ended", lat)
		}
		checkWaitAnswer(t, inst, p.ID, w.res)
		expect(t, inst, p, "canceled", map[string]string{"a": "canceled", "b": "canceled", "c": "canceled"})
		wantAborted(t, r, a, "canceled")
	})

	t.Run("nothing started", func(t *testing.T) {
		p := createPipeline(t, inst, 7, "", []string{"build", "test"},
			job{"name": "a", "stage": "build", "script": "x", "tags": []string{"elsewhere"}},
			job{"name": "b", "stage": "test", "script": "x"})
		waited := make(chan waitCall, 1)
		go func() { waited <- callWait(inst.URL, p.ProjectID, p.ID, 30) }()
		time.Sleep(200 * time.Millisecond) // the waiter is parked on its 2 s safety poll
		sent := time.Now()
		inst.MustDo(t, http.StatusOK, "POST", jobapitest.PipelinePath(p.ProjectID, p.ID)+"/cancel", nil, nil)
		w := <-waited
		if w.err != nil || w.res.Status != "canceled" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 2 {
			t.Fatalf("wait: %+v, %v", w.res, w.err)
		}
		lat := w.at.Sub(sent)
		t.Logf("waiter answered %v after the pipeline cancel", lat)
		if lat > time.Second {
			t.Errorf("waiter answered %v after the cancel: the cancel did not wake it", lat)
		}
		expect(t, inst, p, "canceled", map[string]string{"a": "canceled", "b": "canceled"})
	})
}
