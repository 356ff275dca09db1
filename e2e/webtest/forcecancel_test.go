package webtest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// A job stuck in canceling (its runner gone) has a "Force cancel" button on its page, where a
// running job has "Cancel"; the button ends it canceled at once.
func TestJobPageForceCancelsACancelingJob(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	inst.CreatePipeline(t, 11, []string{"test"}, jobapitest.Job{"name": "hung", "stage": "test", "script": []string{"sleep 1000"}})
	job := inst.NewRunner(t).TakeNamed(t, "hung")
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	path := fmt.Sprintf("/projects/11/jobs/%d", job.ID)

	page := b.get(path, http.StatusOK)
	if !strings.Contains(page, `id="cancel-job"`) || strings.Contains(page, `id="force-cancel-job"`) {
		t.Error("a running job's page: want Cancel, not Force cancel")
	}
	b.post(path+"/cancel", nil, http.StatusSeeOther)
	if j := inst.Job(t, 11, job.ID); j.Status != "canceling" {
		t.Fatalf("after Cancel: %s, want canceling", j.Status)
	}
	page = b.get(path, http.StatusOK)
	if !strings.Contains(page, `id="force-cancel-job"`) || strings.Contains(page, `id="cancel-job"`) {
		t.Error("a canceling job's page: want Force cancel, not Cancel")
	}
	// The runner never answers; Cancel again would change nothing. Force cancel ends it.
	b.post(path+"/cancel", url.Values{"force": {"true"}}, http.StatusSeeOther)
	var j api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/projects/11/jobs/"+fmt.Sprint(job.ID), nil, &j)
	if j.Status != "canceled" {
		t.Errorf("after Force cancel: %s, want canceled", j.Status)
	}
	if ev := jobapitest.EventTypes(inst.Events(t, 11, job.ID)); !strings.HasSuffix(ev, "force_canceled") {
		t.Errorf("events %s, want force_canceled last", ev)
	}
}
