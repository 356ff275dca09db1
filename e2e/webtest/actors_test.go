package webtest

import (
	"fmt"
	"html"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestEveryActionNamesItsActor: the audit log and the events of jobs and pipelines say who
// did each thing (the admin token with its request, a web session, a runner, jobapi
// itself), and the job page, the pipeline page and the audit page show it.
func TestEveryActionNamesItsActor(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	p := inst.CreatePipeline(t, 1, []string{"test"},
		jobapitest.Job{"name": "unit", "stage": "test", "script": []string{"true"}},
		jobapitest.Job{"name": "lint", "stage": "test", "script": []string{"true"}})
	job := runner.TakeNamed(t, "unit")
	runner.Finish(t, job, runnerclient.StateFailed, "script_failure")

	// Retried through the API with the admin token: the retried event and the audit name it
	// with the request.
	var retried api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/retry", job.ID), nil, &retried)
	var retryActor string
	for _, e := range inst.Events(t, 1, job.ID) {
		if e.Type == "retried" {
			retryActor = fmt.Sprint(e.Detail["actor"])
		}
	}
	if !strings.HasPrefix(retryActor, "admin (request ") {
		t.Errorf("the retried event's actor is %q, want admin (request …)", retryActor)
	}

	// Canceled from the web UI: the pipeline's history names the session.
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	b.post(fmt.Sprintf("/projects/1/pipelines/%d/cancel", p.ID), nil, http.StatusSeeOther)

	var audit []api.AuditEvent
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, &audit)
	byAction := map[string]string{}
	for _, e := range audit {
		byAction[e.Action+" "+e.Target] = e.Actor
	}
	pipelineTarget := fmt.Sprintf(" pipeline:%d", p.ID)
	for action, prefix := range map[string]string{
		"pipeline_created" + pipelineTarget:                                   "admin (request ",
		fmt.Sprintf("job_retried job:%d", job.ID):                             "admin (request ",
		"pipeline_canceled" + pipelineTarget:                                  "admin (web session ",
		fmt.Sprintf("runner_created runner:%d", jobRunnerID(t, inst, job.ID)): "admin (request ",
	} {
		if got, ok := byAction[action]; !ok || !strings.HasPrefix(got, prefix) {
			t.Errorf("audit %s: actor %q (recorded %v), want %s…", action, got, ok, prefix)
		}
	}

	// The job page: the runner's own events name the runner and its manager, the retry the
	// admin, the queueing jobapi.
	jobPage := html.UnescapeString(b.get(fmt.Sprintf("/projects/1/jobs/%d", job.ID), http.StatusOK))
	for _, want := range []string{
		fmt.Sprintf(`<td class="actor">runner #%d (%s)</td>`, jobRunnerID(t, inst, job.ID), runner.SystemID),
		`<td class="actor">admin (request `,
		`<td class="actor">jobapi</td>`,
	} {
		if !strings.Contains(jobPage, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	// The pipeline page: created by the API's admin, canceled by the web session.
	pipelinePage := html.UnescapeString(b.get(fmt.Sprintf("/projects/1/pipelines/%d", p.ID), http.StatusOK))
	history := pipelinePage[strings.Index(pipelinePage, `id="pipeline-history"`):]
	created, canceled := strings.Index(history, "<td>pipeline_created</td>"), strings.Index(history, "<td>pipeline_canceled</td>")
	if created < 0 || canceled < created {
		t.Fatalf("pipeline history lacks created then canceled:\n%s", history)
	}
	if !strings.Contains(history[created:canceled], `<td class="actor">admin (request `) ||
		!strings.Contains(history[canceled:], `<td class="actor">admin (web session `) {
		t.Errorf("pipeline history does not name who created and canceled it:\n%s", history)
	}
	// The audit page lists them too, linked to the pipeline.
	auditPage := html.UnescapeString(b.get("/audit", http.StatusOK))
	for _, want := range []string{`<td class="actor">admin (web session `, `<td>pipeline_canceled</td>`,
		fmt.Sprintf(`<a href="/projects/1/pipelines/%d">pipeline:%d</a>`, p.ID, p.ID)} {
		if !strings.Contains(auditPage, want) {
			t.Errorf("audit page lacks %q", want)
		}
	}
	b.get("/audit?page=x", http.StatusBadRequest)
}

// jobRunnerID is the id of the runner that took job id, as the API shows it.
func jobRunnerID(t *testing.T, inst *jobapitest.Instance, id int64) int64 {
	t.Helper()
	j := inst.Job(t, 1, id)
	if j.Runner == nil {
		t.Fatalf("job %d shows no runner", id)
	}
	return j.Runner.ID
}
