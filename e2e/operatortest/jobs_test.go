package operatortest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

func TestCancelJob(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)

	t.Run("pending is canceled at once", func(t *testing.T) {
		p := inst.CreatePipeline(t, 8, []string{"a", "b"},
			jobapitest.Job{"name": "first", "stage": "a", "script": "x"},
			jobapitest.Job{"name": "second", "stage": "b", "script": "x"})
		id := jobapitest.JobByName(t, p, "first").ID
		var d api.JobDetail
		inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/8/jobs/%d/cancel", id), nil, &d)
		if d.Status != "canceled" || d.FinishedAt == nil {
			t.Errorf("canceled pending job %+v", d)
		}
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "canceled", map[string]string{"first": "canceled", "second": "skipped"})
		jobapitest.WantNoJob(t, inst.URL, token)
		// Canceling it again: it is finished.
		resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/8/jobs/%d/cancel", id), nil)
		jobapitest.WantJSONError(t, resp, b, http.StatusConflict)
		// The event names the operator action.
		ev := inst.Events(t, 8, id)
		if last := ev[len(ev)-1]; last.Type != "canceled" || !strings.HasPrefix(fmt.Sprint(last.Detail["actor"]), "admin") {
			t.Errorf("last event %+v", last)
		}
	})

	t.Run("running goes through canceling", func(t *testing.T) {
		p := inst.CreatePipeline(t, 8, []string{"a", "b"},
			jobapitest.Job{"name": "long", "stage": "a", "script": "sleep 100"},
			jobapitest.Job{"name": "after", "stage": "b", "script": "x"})
		job := jobapitest.TakeJobNamed(t, inst, token, "long")
		resp, b := jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, []byte("working\n"))
		jobapitest.WantStatus(t, resp, b, http.StatusAccepted)

		var d api.JobDetail
		inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/8/jobs/%d/cancel", job.ID), nil, &d)
		if d.Status != "canceling" {
			t.Errorf("canceled running job %s, want canceling", d.Status)
		}
		// Asking again while canceling is harmless.
		inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/8/jobs/%d/cancel", job.ID), nil, &d)

		// The runner learns it from its next PUT and PATCH (and may still send after_script output).
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "running"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "canceling")
		resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 8, []byte("after_script\n"))
		jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
		jobapitest.WantJobStatus(t, resp, "canceling")

		// Its final update (failed/job_canceled, as gitlab-runner sends it) ends it canceled.
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "failed", "failure_reason": "job_canceled"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "canceled")
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "failed", "failure_reason": "job_canceled"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "canceled")
		resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 21, []byte("late\n"))
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
		jobapitest.WantJobStatus(t, resp, "canceled")

		got := inst.Pipeline(t, p)
		jobapitest.WantStatuses(t, got, "canceled", map[string]string{"long": "canceled", "after": "skipped"})
		if d := inst.Job(t, 8, job.ID); d.RetriedBy != nil {
			t.Errorf("a canceled job was retried: %+v", d)
		}
		ev := jobapitest.EventTypes(inst.Events(t, 8, job.ID))
		if !strings.Contains(ev, "cancel_requested") || !strings.HasSuffix(ev, "finished") {
			t.Errorf("events %s", ev)
		}
		_, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/8/jobs/%d/trace", job.ID), nil)
		if string(b) != "working\nafter_script\n" {
			t.Errorf("trace %q", b)
		}
	})

	t.Run("pipeline cancel", func(t *testing.T) {
		p := inst.CreatePipeline(t, 8, []string{"a", "b"},
			jobapitest.Job{"name": "run", "stage": "a", "script": "x"},
			jobapitest.Job{"name": "wait", "stage": "a", "script": "x"},
			jobapitest.Job{"name": "later", "stage": "b", "script": "x"})
		job := jobapitest.TakeJobNamed(t, inst, token, "run")
		var got api.Pipeline
		inst.MustDo(t, http.StatusOK, "POST", jobapitest.PipelinePath(p.ProjectID, p.ID)+"/cancel", nil, &got)
		jobapitest.WantStatuses(t, got, "running", map[string]string{"run": "canceling", "wait": "canceled", "later": "canceled"})
		jobapitest.FinishJob(t, inst.URL, job, "success", "", 0)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "canceled", map[string]string{"run": "canceled"})
	})
}

func TestRetryJob(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	p := inst.CreatePipeline(t, 6, []string{"build", "test"},
		jobapitest.Job{"name": "compile", "stage": "build", "script": "x"},
		jobapitest.Job{"name": "unit", "stage": "test", "script": "x"})
	first := jobapitest.TakeJobNamed(t, inst, token, "compile")
	jobapitest.FinishJob(t, inst.URL, first, "failed", "script_failure", 1)
	jobapitest.WantStatuses(t, inst.Pipeline(t, p), "failed", map[string]string{"compile": "failed", "unit": "skipped"})

	var retry api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/6/jobs/%d/retry", first.ID), nil, &retry)
	if retry.ID == first.ID || retry.Status != "pending" || retry.Attempt != 2 || retry.RetryOf == nil || *retry.RetryOf != first.ID ||
		retry.Name != "compile" || retry.Stage != "build" {
		t.Fatalf("retry %+v", retry)
	}
	if old := inst.Job(t, 6, first.ID); old.Status != "failed" || old.RetriedBy == nil || *old.RetriedBy != retry.ID {
		t.Errorf("old attempt %+v", old)
	}
	// The pipeline is re-opened: the skipped stage waits again.
	jobapitest.WantStatuses(t, inst.Pipeline(t, p), "pending", map[string]string{"compile": "pending", "unit": "created"})
	// The old attempt cannot be retried twice.
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/6/jobs/%d/retry", first.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusConflict)
	// A pending job cannot be retried.
	resp, b = inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/6/jobs/%d/retry", retry.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusConflict)
	// Another project's path does not find it.
	resp, b = inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/7/jobs/%d/retry", retry.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)

	second := jobapitest.TakeJobNamed(t, inst, token, "compile")
	if second.ID != retry.ID {
		t.Fatalf("runner got %d, want the retry %d", second.ID, retry.ID)
	}
	jobapitest.FinishJob(t, inst.URL, second, "success", "", 0)
	jobapitest.FinishJob(t, inst.URL, jobapitest.TakeJobNamed(t, inst, token, "unit"), "success", "", 0)
	got := inst.Pipeline(t, p)
	jobapitest.WantStatuses(t, got, "success", map[string]string{"compile": "success", "unit": "success"})
	if len(got.Jobs) != 3 {
		t.Errorf("pipeline jobs %+v, want both attempts and unit", got.Jobs)
	}

	ev := inst.Events(t, 6, first.ID)
	if types := jobapitest.EventTypes(ev); types != "queued,assigned,finished,retried" {
		t.Errorf("first attempt events %s", types)
	}
	if d := ev[len(ev)-1].Detail; d["new_id"] != float64(retry.ID) {
		t.Errorf("retried event detail %v", d)
	}
}

func TestJobEvents(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	inst.CreatePipeline(t, 2, []string{"test"}, jobapitest.Job{"name": "j", "stage": "test", "script": "x"})
	resp, b := jobapitest.RequestJob(t, inst.URL, token, "s_events", "")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	job := jobapitest.Decode[api.Job](t, b)
	jobapitest.FinishJob(t, inst.URL, job, "failed", "script_failure", 4)

	path := fmt.Sprintf("/api/v4/projects/2/jobs/%d/events", job.ID)
	resp, b = inst.Do(t, "GET", path, nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	// Raw shape: exactly {id, type, at, runner_manager, detail}.
	raw := jobapitest.Decode[[]map[string]any](t, b)
	for _, e := range raw {
		for _, k := range []string{"id", "type", "at", "runner_manager", "detail"} {
			if _, ok := e[k]; !ok {
				t.Errorf("event %v lacks %s", e, k)
			}
		}
		if _, ok := e["detail"].(map[string]any); !ok {
			t.Errorf("event detail %v is not an object", e["detail"])
		}
	}
	ev := jobapitest.Decode[[]api.Event](t, b)
	if types := jobapitest.EventTypes(ev); types != "queued,assigned,finished" {
		t.Fatalf("events %s", types)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].ID <= ev[i-1].ID || ev[i].At.Before(ev[i-1].At) {
			t.Errorf("events not oldest first: %+v", ev)
		}
	}
	if ev[1].RunnerManager != "s_events" || ev[2].RunnerManager != "s_events" {
		t.Errorf("runner_manager of assigned/finished: %q %q", ev[1].RunnerManager, ev[2].RunnerManager)
	}
	if d := ev[2].Detail; d["status"] != "failed" || d["failure_reason"] != "script_failure" || d["exit_code"] != float64(4) {
		t.Errorf("finished detail %v", d)
	}
	if time.Since(ev[0].At) > time.Minute || ev[0].At.IsZero() {
		t.Errorf("event time %v", ev[0].At)
	}
	// Paginated like every list.
	resp, b = inst.Do(t, "GET", path+"?per_page=2&page=2", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "2", "X-Per-Page": "2", "X-Total": "3", "X-Next-Page": ""})
	if page := jobapitest.Decode[[]api.Event](t, b); len(page) != 1 || page[0].Type != "finished" {
		t.Errorf("second page %+v", page)
	}
	// Past the end: an empty page that still tells the total.
	resp, b = inst.Do(t, "GET", path+"?per_page=2&page=5", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "5", "X-Total": "3", "X-Next-Page": ""})
	if page := jobapitest.Decode[[]api.Event](t, b); len(page) != 0 {
		t.Errorf("page past the end %+v", page)
	}
}
