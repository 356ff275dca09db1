package webtest

import (
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// The pages show a pipeline's and a job's time running apart from their time queued, as
// GitLab does: a pipeline that waited 6 minutes for a runner and ran 2, then had a job
// retried half an hour later that has run 1 minute so far, shows 3 minutes running and 6
// queued, not the 39 minutes since it was created.
func TestPagesShowDurationApartFromQueue(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now})
	p := inst.CreatePipeline(t, 9, []string{"test"},
		jobapitest.Job{"name": "a", "stage": "test", "script": []string{"true"}},
		jobapitest.Job{"name": "b", "stage": "test", "script": []string{"false"}})
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	pipelinePath := fmt.Sprintf("/projects/9/pipelines/%d", p.ID)

	clock.Add(4 * time.Minute)
	page := b.get(pipelinePath, http.StatusOK)
	wantFact(t, page, "pipeline-duration", "—")
	wantFact(t, page, "pipeline-queued", "4m 00s")

	clock.Add(2 * time.Minute)
	r := inst.NewRunner(t)
	jobs := r.TakeAll(t, 2)
	clock.Add(2 * time.Minute)
	r.Finish(t, jobs["a"], runnerclient.StateSuccess, "")
	r.Finish(t, jobs["b"], runnerclient.StateFailed, "script_failure")

	clock.Add(30 * time.Minute)
	var retry api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/9/jobs/%d/retry", jobs["b"].ID), nil, &retry)
	clock.Add(time.Minute)
	again := r.TakeNamed(t, "b")
	clock.Add(time.Minute)

	page = b.get(pipelinePath, http.StatusOK)
	wantFact(t, page, "pipeline-duration", "3m 00s")
	wantFact(t, page, "pipeline-queued", "6m 00s")
	list := b.get("/pipelines?project=9", http.StatusOK)
	row := regexp.MustCompile(fmt.Sprintf(`(?s)<tr data-pipeline="%d".*?</tr>`, p.ID)).FindString(list)
	if !regexp.MustCompile(`<td class="duration">3m 00s <span class="muted queued">queued 6m 00s</span></td>`).MatchString(row) {
		t.Errorf("pipelines list row, want 3m 00s queued 6m 00s:\n%s", row)
	}
	jobPage := b.get(fmt.Sprintf("/projects/9/jobs/%d", again.ID), http.StatusOK)
	wantFact(t, jobPage, "job-duration", "1m 00s")
	wantFact(t, jobPage, "job-queued", "1m 00s")
	first := b.get(fmt.Sprintf("/projects/9/jobs/%d", jobs["b"].ID), http.StatusOK)
	wantFact(t, first, "job-duration", "2m 00s")
	wantFact(t, first, "job-queued", "6m 00s")

	// Finished: the durations stop with it.
	r.Finish(t, again, runnerclient.StateSuccess, "")
	clock.Add(time.Hour)
	page = b.get(pipelinePath, http.StatusOK)
	wantFact(t, page, "pipeline-duration", "3m 00s")
}

// wantFact requires the page's element id to hold text.
func wantFact(t *testing.T, page, id, text string) {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(page)
	if m == nil || m[1] != text {
		t.Errorf("%s: %q, want %q", id, m, text)
	}
}
