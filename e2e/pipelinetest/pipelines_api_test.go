package pipelinetest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

func listedIDs(ps []api.PipelineBasic) []int64 {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// TestPipelineListFilters: GitLab's GET /projects/:id/pipelines, newest first, with each of
// its filters, orders and pages (X-Total, X-Next-Page, Link), and a 400 naming a value
// GitLab would refuse.
func TestPipelineListFilters(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	const pid = 41
	sha := strings.Repeat("a1", 20)
	create := func(body map[string]any) api.Pipeline {
		t.Helper()
		body["jobs"] = []map[string]any{{"name": "j", "stage": "test", "script": "true"}}
		var p api.Pipeline
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", pid), body, &p)
		return p
	}
	p1 := create(map[string]any{"ref": "main"})
	p2 := create(map[string]any{"ref": "main", "sha": sha, "source": "push"})
	p3 := create(map[string]any{"ref": "refs/tags/v1", "source": "web"})
	p4 := create(map[string]any{"ref": "feature/x", "source": "web"})
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/cancel", pid, p1.ID), nil, nil)
	other := inst.CreatePipeline(t, pid+1, []string{"test"}, jobapitest.Job{"name": "j", "script": "true"})

	list := func(query string) ([]int64, *http.Response) {
		t.Helper()
		var out []api.PipelineBasic
		resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines%s", pid, query), nil)
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return listedIDs(out), resp
	}
	far := url.QueryEscape(time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339))
	for query, want := range map[string][]int64{
		"":                                     {p4.ID, p3.ID, p2.ID, p1.ID},
		"?sort=asc":                            {p1.ID, p2.ID, p3.ID, p4.ID},
		"?scope=finished":                      {p1.ID},
		"?scope=pending":                       {p4.ID, p3.ID, p2.ID},
		"?scope=running":                       {},
		"?status=canceled":                     {p1.ID},
		"?status=skipped":                      {},
		"?scope=pending&status=canceled":       {},
		"?ref=main":                            {p2.ID, p1.ID},
		"?ref=v1":                              {p3.ID},
		"?ref=refs/tags/v1":                    {p3.ID},
		"?ref=refs/heads/feature/x":            {p4.ID},
		"?sha=" + sha:                          {p2.ID},
		"?source=push":                         {p2.ID},
		"?source=web":                          {p4.ID, p3.ID},
		"?source=schedule":                     {},
		"?scope=branches":                      {p4.ID, p2.ID},
		"?scope=tags":                          {p3.ID},
		"?updated_after=2000-01-01":            {p4.ID, p3.ID, p2.ID, p1.ID},
		"?updated_after=" + far:                {},
		"?updated_before=" + far:               {p4.ID, p3.ID, p2.ID, p1.ID},
		"?updated_before=2000-01-01T00:00:00Z": {},
		"?order_by=ref&sort=asc":               {p4.ID, p1.ID, p2.ID, p3.ID},
		"?order_by=status&sort=asc":            {p1.ID, p2.ID, p3.ID, p4.ID},
		"?order_by=updated_at":                 {p1.ID, p4.ID, p3.ID, p2.ID},
		"?order_by=user_id":                    {p4.ID, p3.ID, p2.ID, p1.ID},
	} {
		if got, _ := list(query); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", query, got, want)
		}
	}
	if got, _ := list(""); slices.Contains(got, other.ID) {
		t.Errorf("another project's pipeline %d listed", other.ID)
	}
	for _, path := range []string{"/api/v4/projects/4242/pipelines", "/api/v4/projects/4242/pipelines/latest"} {
		resp, b := inst.Do(t, "GET", path, nil)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusNotFound); msg != "404 Project Not Found" {
			t.Errorf("%s of a project that does not exist: %q", path, msg)
		}
	}

	// Pages, with GitLab's headers and Link (python-gitlab follows rel="next").
	got, resp := list("?per_page=3")
	if !slices.Equal(got, []int64{p4.ID, p3.ID, p2.ID}) || resp.Header.Get("X-Total") != "4" || resp.Header.Get("X-Next-Page") != "2" {
		t.Errorf("page 1: %v, X-Total %q X-Next-Page %q", got, resp.Header.Get("X-Total"), resp.Header.Get("X-Next-Page"))
	}
	link := resp.Header.Get("Link")
	if !strings.Contains(link, `page=2&per_page=3>; rel="next"`) || !strings.Contains(link, `rel="last"`) || strings.Contains(link, `rel="prev"`) {
		t.Errorf("page 1 Link: %s", link)
	}
	got, resp = list("?per_page=3&page=2&sort=desc")
	if !slices.Equal(got, []int64{p1.ID}) || resp.Header.Get("X-Next-Page") != "" || strings.Contains(resp.Header.Get("Link"), `rel="next"`) ||
		!strings.Contains(resp.Header.Get("Link"), "sort=desc") {
		t.Errorf("page 2: %v, X-Next-Page %q, Link %s", got, resp.Header.Get("X-Next-Page"), resp.Header.Get("Link"))
	}
	if got, resp := list("?per_page=3&page=5&status=canceled"); len(got) != 0 || resp.Header.Get("X-Total") != "1" {
		t.Errorf("past the last page: %v, X-Total %q (the filtered count)", got, resp.Header.Get("X-Total"))
	}

	for query, want := range map[string]string{
		"?scope=bogus":           "scope does not have a valid value",
		"?status=done":           "status does not have a valid value",
		"?source=cron":           "source does not have a valid value",
		"?order_by=name":         "order_by does not have a valid value",
		"?sort=up":               "sort does not have a valid value",
		"?updated_after=monday":  "updated_after is invalid",
		"?updated_before=1/2/24": "updated_before is invalid",
	} {
		resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines%s", pid, query), nil)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, want) {
			t.Errorf("%q: %q, want %q", query, msg, want)
		}
	}
}

// TestPipelineLatestAndVariables: …/pipelines/latest is the newest pipeline of a ref (the
// default branch without one), child pipelines aside; …/variables shows the pipeline's own
// variables with their values, as GitLab does.
func TestPipelineLatestAndVariables(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "default_branch": "trunk"}, &project)
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	job := []map[string]any{{"name": "j", "stage": "test", "script": "true"}}
	var older, newer, tag api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", path, map[string]any{"ref": "trunk", "jobs": job}, &older)
	inst.MustDo(t, http.StatusCreated, "POST", path, map[string]any{"ref": "trunk", "jobs": job, "variables": []map[string]string{
		{"key": "DEPLOY", "value": "yes"}, {"key": "CONFIG", "value": "a: 1\n", "variable_type": "file"}}}, &newer)
	inst.MustDo(t, http.StatusCreated, "POST", path, map[string]any{"ref": "refs/tags/v2", "jobs": job}, &tag)

	latest := func(query string) api.Pipeline {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/latest%s", project.ID, query), nil, &p)
		return p
	}
	if p := latest(""); p.ID != newer.ID || len(p.Jobs) != 1 {
		t.Errorf("latest of the default branch: %d (%d jobs), want %d", p.ID, len(p.Jobs), newer.ID)
	}
	if p := latest("?ref=trunk"); p.ID != newer.ID {
		t.Errorf("latest of trunk: %d, want %d", p.ID, newer.ID)
	}
	if p := latest("?ref=v2"); p.ID != tag.ID || !p.Tag || p.Ref != "refs/tags/v2" {
		t.Errorf("latest of tag v2: %d tag %v ref %q, want %d, a tag", p.ID, p.Tag, p.Ref, tag.ID)
	}
	resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/latest?ref=nothing", project.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)

	var vars []api.PipelineVariableValue
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/variables", project.ID, newer.ID), nil, &vars)
	want := []api.PipelineVariableValue{{Key: "DEPLOY", Value: "yes", VariableType: "env_var"}, {Key: "CONFIG", Value: "a: 1\n", VariableType: "file"}}
	if !slices.Equal(vars, want) {
		t.Errorf("variables %+v, want %+v", vars, want)
	}
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/variables", project.ID, older.ID), nil, &vars)
	if vars == nil || len(vars) != 0 {
		t.Errorf("variables of a pipeline without: %#v, want []", vars)
	}
	resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/variables", project.ID+1, newer.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
}

// TestPipelineRetry: POST …/pipelines/:id/retry runs a pipeline's failed and canceled jobs
// again: those of the stage it reached at once, later ones in their turn, what was skipped
// after them too, and the pipeline ends as a new one would. GitLab's timing fields follow.
func TestPipelineRetry(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	const pid = 43
	r := inst.NewRunner(t)
	p := inst.CreatePipeline(t, pid, []string{"build", "test", "deploy"},
		jobapitest.Job{"name": "flaky", "stage": "build", "script": "x"},
		jobapitest.Job{"name": "solid", "stage": "build", "script": "x"},
		jobapitest.Job{"name": "unit", "stage": "test", "script": "x"},
		jobapitest.Job{"name": "ship", "stage": "deploy", "script": "x"})
	jobs := r.TakeAll(t, 2)
	r.Finish(t, jobs["flaky"], runnerclient.StateFailed, "script_failure")
	r.Finish(t, jobs["solid"], runnerclient.StateSuccess, "")
	p = inst.Pipeline(t, p)
	if p.Status != "failed" || jobapitest.Latest(p)["unit"].Status != "skipped" {
		t.Fatalf("before the retry: %s, unit %s", p.Status, jobapitest.Latest(p)["unit"].Status)
	}
	if p.Duration == nil || p.StartedAt == nil || p.QueuedDuration == nil || *p.QueuedDuration < 0 {
		t.Errorf("finished pipeline: duration %v started_at %v queued_duration %v", p.Duration, p.StartedAt, p.QueuedDuration)
	}
	if want := fmt.Sprintf("/projects/%d/pipelines/%d", pid, p.ID); !strings.HasSuffix(p.WebURL, want) || p.Tag {
		t.Errorf("web_url %q (want …%s), tag %v", p.WebURL, want, p.Tag)
	}

	var retried api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/retry", pid, p.ID), nil, &retried)
	latest := jobapitest.Latest(retried)
	if retried.Status != "running" || latest["flaky"].Status != "pending" || latest["flaky"].Attempt != 2 ||
		latest["solid"].Attempt != 1 || latest["unit"].Status != "created" || latest["ship"].Status != "created" {
		t.Fatalf("after the retry: %s %+v", retried.Status, latest)
	}
	r.Finish(t, r.TakeNamed(t, "flaky"), runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "unit"), runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "ship"), runnerclient.StateSuccess, "")
	if p = inst.Pipeline(t, p); p.Status != "success" || p.Duration == nil || p.StartedAt == nil || p.FinishedAt == nil {
		t.Errorf("retried pipeline ended %s, duration %v started_at %v finished_at %v; want success and all three", p.Status, p.Duration, p.StartedAt, p.FinishedAt)
	}
	// Nothing failed or canceled: the pipeline is answered as it is.
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/retry", pid, p.ID), nil, &retried)
	if retried.Status != "success" || len(retried.Jobs) != len(p.Jobs) {
		t.Errorf("retry of a successful pipeline: %s, %d jobs (was %d)", retried.Status, len(retried.Jobs), len(p.Jobs))
	}

	// A canceled pipeline: the job canceled while it ran and the one canceled before its
	// stage came both run again, in stage order.
	c := inst.CreatePipeline(t, pid, []string{"build", "test"},
		jobapitest.Job{"name": "compile", "stage": "build", "script": "x"},
		jobapitest.Job{"name": "check", "stage": "test", "script": "x"})
	compile := r.TakeNamed(t, "compile")
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/cancel", pid, c.ID), nil, nil)
	res, err := r.UpdateJob(t.Context(), compile, runnerclient.StateFailed, runnerclient.UpdateOptions{FailureReason: "job_canceled", ExitCode: 143})
	if err != nil || res.Code != http.StatusOK {
		t.Fatalf("final update after cancel: %+v %v", res, err)
	}
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/retry", pid, c.ID), nil, &retried)
	if latest := jobapitest.Latest(retried); latest["compile"].Status != "pending" || latest["check"].Status != "created" || latest["check"].Attempt != 2 {
		t.Fatalf("retry of a canceled pipeline: %+v", latest)
	}
	r.Finish(t, r.TakeNamed(t, "compile"), runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "check"), runnerclient.StateSuccess, "")
	if c = inst.Pipeline(t, c); c.Status != "success" {
		t.Errorf("retried canceled pipeline ended %s, want success", c.Status)
	}

	// A needs pipeline (planned job by job): the retried job's dependant waits for it.
	d := inst.CreatePipeline(t, pid, []string{"build", "test"},
		jobapitest.Job{"name": "gen", "stage": "build", "script": "x"},
		jobapitest.Job{"name": "use", "stage": "test", "script": "x", "needs": []string{"gen"}})
	r.Finish(t, r.TakeNamed(t, "gen"), runnerclient.StateFailed, "script_failure")
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/retry", pid, d.ID), nil, &retried)
	if latest := jobapitest.Latest(retried); latest["gen"].Status != "pending" || latest["use"].Status != "created" {
		t.Fatalf("retry of a needs pipeline: %+v", latest)
	}
	r.Finish(t, r.TakeNamed(t, "gen"), runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "use"), runnerclient.StateSuccess, "")
	if d = inst.Pipeline(t, d); d.Status != "success" {
		t.Errorf("retried needs pipeline ended %s, want success", d.Status)
	}

	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/retry", pid+1, c.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
}

// TestPipelineDelete: DELETE …/pipelines/:id answers 204 and removes the pipeline with its
// jobs, their events and logs; a pipeline still running is a 409 and stays.
func TestPipelineDelete(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	const pid = 44
	r := inst.NewRunner(t)
	p := inst.CreatePipeline(t, pid, []string{"test"}, jobapitest.Job{"name": "j", "script": "x"})
	job := r.Take(t)
	path := fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", pid, p.ID)
	resp, b := inst.Do(t, "DELETE", path, nil)
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusConflict); !strings.Contains(msg, "cancel it first") {
		t.Errorf("delete of a running pipeline: %q", msg)
	}
	r.Patch(t, job, 0, "hello\n")
	r.Finish(t, job, runnerclient.StateSuccess, "")
	kept := inst.CreatePipeline(t, pid, []string{"test"}, jobapitest.Job{"name": "k", "script": "x"})

	resp, b = inst.Do(t, "DELETE", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", pid+1, p.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	resp, b = inst.Do(t, "DELETE", path, nil)
	jobapitest.WantStatus(t, resp, b, http.StatusNoContent)
	for _, c := range []struct{ what, sql string }{
		{"pipeline", "SELECT count(*) FROM pipelines WHERE id = $1"},
		{"builds", "SELECT count(*) FROM builds WHERE pipeline_id = $1"},
		{"events", "SELECT count(*) FROM build_events WHERE build_id = " + fmt.Sprint(job.ID) + " AND $1::bigint > 0"},
		{"log chunks", "SELECT count(*) FROM build_trace_chunks WHERE build_id = " + fmt.Sprint(job.ID) + " AND $1::bigint > 0"},
	} {
		if n := jobapitest.QueryInt(t, inst.Pool, c.sql, p.ID); n != 0 {
			t.Errorf("%s left: %d", c.what, n)
		}
	}
	resp, b = inst.Do(t, "GET", path, nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", pid, job.ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	resp, b = inst.Do(t, "DELETE", path, nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	if got := inst.Pipeline(t, kept); got.ID != kept.ID {
		t.Errorf("the other pipeline: %+v", got)
	}
	var audit []api.AuditEvent
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, &audit)
	if !slices.ContainsFunc(audit, func(e api.AuditEvent) bool {
		return e.Action == "pipeline_deleted" && e.Target == fmt.Sprintf("pipeline:%d", p.ID)
	}) {
		t.Errorf("no pipeline_deleted audit event: %+v", audit)
	}
}
