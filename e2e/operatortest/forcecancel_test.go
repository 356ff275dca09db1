package operatortest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// GitLab's force cancel (POST …/cancel?force=true): a job stuck in canceling because its
// runner died ends canceled at once instead of after JOBAPI_CANCELING_TIMEOUT, and its
// pipeline moves on; without force a canceling job stays canceling.
func TestForceCancelJob(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	cancel := func(id int64, query string) string {
		return fmt.Sprintf("/api/v4/projects/8/jobs/%d/cancel%s", id, query)
	}

	t.Run("canceling ends canceled at once", func(t *testing.T) {
		p := inst.CreatePipeline(t, 8, []string{"a", "b"},
			jobapitest.Job{"name": "stuck", "stage": "a", "script": "sleep 100"},
			jobapitest.Job{"name": "other", "stage": "a", "script": "x"},
			jobapitest.Job{"name": "after", "stage": "b", "script": "x"})
		stuck := jobapitest.TakeJobNamed(t, inst, token, "stuck")
		other := jobapitest.TakeJobNamed(t, inst, token, "other")
		var d api.JobDetail
		inst.MustDo(t, http.StatusOK, "POST", cancel(stuck.ID, ""), nil, &d)
		if d.Status != "canceling" {
			t.Fatalf("cancel of a running job: %s, want canceling", d.Status)
		}
		// Its runner died: no final update comes. Without force, nothing changes.
		for _, q := range []string{"", "?force=false"} {
			inst.MustDo(t, http.StatusOK, "POST", cancel(stuck.ID, q), nil, &d)
			if d.Status != "canceling" {
				t.Errorf("cancel%s of a canceling job: %s, want canceling", q, d.Status)
			}
		}
		inst.MustDo(t, http.StatusOK, "POST", cancel(stuck.ID, "?force=true"), nil, &d)
		if d.Status != "canceled" || d.FinishedAt == nil {
			t.Errorf("force cancel of a canceling job: %s (finished %v), want canceled", d.Status, d.FinishedAt)
		}
		ev := inst.Events(t, 8, stuck.ID)
		if last := ev[len(ev)-1]; last.Type != "force_canceled" || !strings.HasPrefix(fmt.Sprint(last.Detail["actor"]), "admin") {
			t.Errorf("last event %+v, want force_canceled by the admin", last)
		}
		// The rest of the stage still runs: the pipeline too, until it ends; then it is
		// canceled and the next stage skipped.
		if got := inst.Pipeline(t, p); got.Status != "running" {
			t.Errorf("pipeline with a job still running: %s", got.Status)
		}
		jobapitest.FinishJob(t, inst.URL, other, "success", "", 0)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "canceled", map[string]string{"stuck": "canceled", "other": "success", "after": "skipped"})
		// Should the runner come back after all, it learns the job is over.
		resp, b := jobapitest.UpdateJob(t, inst.URL, stuck.ID, stuck.Token, map[string]any{"state": "running"})
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
		jobapitest.WantJobStatus(t, resp, "canceled")
		// Forcing it again: it is finished, as for any cancel of a finished job.
		resp, b = inst.Do(t, "POST", cancel(stuck.ID, "?force=true"), nil)
		jobapitest.WantJSONError(t, resp, b, http.StatusConflict)
	})

	t.Run("a job not canceling is canceled as without force", func(t *testing.T) {
		p := inst.CreatePipeline(t, 8, []string{"a", "b"},
			jobapitest.Job{"name": "running", "stage": "a", "script": "sleep 100"},
			jobapitest.Job{"name": "pending", "stage": "a", "script": "x"},
			jobapitest.Job{"name": "created", "stage": "b", "script": "x"})
		running := jobapitest.TakeJobNamed(t, inst, token, "running")
		var d api.JobDetail
		// GitLab's force_cancel event only leaves canceling, and its API answers a running
		// job's force with the job unchanged; jobapi cancels it, as the caller asked.
		inst.MustDo(t, http.StatusOK, "POST", cancel(running.ID, "?force=true"), nil, &d)
		if d.Status != "canceling" {
			t.Errorf("force cancel of a running job: %s, want canceling (its runner is told first)", d.Status)
		}
		inst.MustDo(t, http.StatusOK, "POST", cancel(jobapitest.JobByName(t, p, "pending").ID, "?force=true"), nil, &d)
		if d.Status != "canceled" {
			t.Errorf("force cancel of a pending job: %s, want canceled", d.Status)
		}
		ev := jobapitest.EventTypes(inst.Events(t, 8, d.ID))
		if strings.Contains(ev, "force_canceled") {
			t.Errorf("a pending job's cancel recorded %s", ev)
		}
		inst.MustDo(t, http.StatusOK, "POST", cancel(running.ID, "?force=true"), nil, &d)
		if d.Status != "canceled" {
			t.Errorf("second force cancel: %s, want canceled", d.Status)
		}
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "canceled", map[string]string{"running": "canceled", "pending": "canceled", "created": "skipped"})
	})

	t.Run("a bad force is a 400", func(t *testing.T) {
		p := inst.CreatePipeline(t, 8, []string{"a"}, jobapitest.Job{"name": "x", "stage": "a", "script": "x"})
		id := jobapitest.JobByName(t, p, "x").ID
		resp, b := inst.Do(t, "POST", cancel(id, "?force=maybe"), nil)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "force") {
			t.Errorf("message %q does not name force", msg)
		}
		if j := inst.Job(t, 8, id); j.Status != "pending" {
			t.Errorf("a refused cancel changed the job: %s", j.Status)
		}
	})
}
