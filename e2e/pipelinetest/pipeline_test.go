package pipelinetest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

func TestPipelineStages(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	stages := []string{"build", "test", "deploy"}

	t.Run("stages release in order", func(t *testing.T) {
		p := inst.CreatePipeline(t, 5, stages,
			jobapitest.Job{"name": "compile", "stage": "build", "script": "make"},
			jobapitest.Job{"name": "unit", "stage": "test", "script": "go test"},
			jobapitest.Job{"name": "lint", "stage": "test", "script": "vet"},
			jobapitest.Job{"name": "ship", "stage": "deploy", "script": "ship"})
		if p.ProjectID != 5 || p.ID == 0 || len(p.Jobs) != 4 {
			t.Fatalf("created pipeline %+v", p)
		}
		jobapitest.WantStatuses(t, p, "pending", map[string]string{"compile": "pending", "unit": "created", "lint": "created", "ship": "created"})

		compile := jobapitest.TakeJobNamed(t, inst, token, "compile")
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "running", map[string]string{"compile": "running", "unit": "created"})
		jobapitest.WantNoJob(t, inst.URL, token)
		jobapitest.FinishJob(t, inst.URL, compile, "success", "", 0)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "running", map[string]string{"compile": "success", "unit": "pending", "lint": "pending", "ship": "created"})

		unit := jobapitest.TakeJobNamed(t, inst, token, "unit")
		lint := jobapitest.TakeJobNamed(t, inst, token, "lint")
		jobapitest.FinishJob(t, inst.URL, unit, "success", "", 0)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "running", map[string]string{"unit": "success", "lint": "running", "ship": "created"})
		jobapitest.FinishJob(t, inst.URL, lint, "success", "", 0)
		ship := jobapitest.TakeJobNamed(t, inst, token, "ship")
		jobapitest.FinishJob(t, inst.URL, ship, "success", "", 0)
		got := inst.Pipeline(t, p)
		jobapitest.WantStatuses(t, got, "success", map[string]string{"compile": "success", "unit": "success", "lint": "success", "ship": "success"})
		if got.FinishedAt == nil {
			t.Error("finished pipeline without finished_at")
		}
		// /jobs lists the same builds in the job shape.
		var jobs []api.JobDetail
		inst.MustDo(t, http.StatusOK, "GET", jobapitest.PipelinePath(p.ProjectID, p.ID)+"/jobs", nil, &jobs)
		if len(jobs) != 4 || jobs[0].Name != "compile" || jobs[0].Status != "success" {
			t.Errorf("pipeline jobs %+v", jobs)
		}
	})

	t.Run("first stage with jobs starts, empty stages are passed over", func(t *testing.T) {
		p := inst.CreatePipeline(t, 5, stages,
			jobapitest.Job{"name": "unit", "stage": "test", "script": "x"},
			jobapitest.Job{"name": "ship", "stage": "deploy", "script": "x"})
		jobapitest.WantStatuses(t, p, "pending", map[string]string{"unit": "pending", "ship": "created"})
		jobapitest.FinishJob(t, inst.URL, jobapitest.TakeJobNamed(t, inst, token, "unit"), "success", "", 0)
		jobapitest.FinishJob(t, inst.URL, jobapitest.TakeJobNamed(t, inst, token, "ship"), "success", "", 0)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "success", nil)
	})

	t.Run("a failure skips later stages", func(t *testing.T) {
		p := inst.CreatePipeline(t, 5, stages,
			jobapitest.Job{"name": "compile", "stage": "build", "script": "x"},
			jobapitest.Job{"name": "other", "stage": "build", "script": "x"},
			jobapitest.Job{"name": "unit", "stage": "test", "script": "x"},
			jobapitest.Job{"name": "ship", "stage": "deploy", "script": "x"})
		compile := jobapitest.TakeJobNamed(t, inst, token, "compile")
		other := jobapitest.TakeJobNamed(t, inst, token, "other")
		jobapitest.FinishJob(t, inst.URL, compile, "failed", "script_failure", 2)
		// The stage still has a running job: nothing is decided yet.
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "running", map[string]string{"compile": "failed", "other": "running", "unit": "created"})
		jobapitest.FinishJob(t, inst.URL, other, "success", "", 0)
		got := inst.Pipeline(t, p)
		jobapitest.WantStatuses(t, got, "failed", map[string]string{"compile": "failed", "other": "success", "unit": "skipped", "ship": "skipped"})
		if got.FinishedAt == nil {
			t.Error("failed pipeline without finished_at")
		}
		jobapitest.WantNoJob(t, inst.URL, token)
		if ev := jobapitest.EventTypes(inst.Events(t, 5, jobapitest.JobByName(t, got, "unit").ID)); ev != "created,skipped" {
			t.Errorf("skipped job events %s", ev)
		}
	})

	t.Run("allow_failure lets the pipeline continue", func(t *testing.T) {
		p := inst.CreatePipeline(t, 5, stages,
			jobapitest.Job{"name": "flaky", "stage": "build", "script": "x", "allow_failure": true},
			jobapitest.Job{"name": "unit", "stage": "test", "script": "x"})
		jobapitest.FinishJob(t, inst.URL, jobapitest.TakeJobNamed(t, inst, token, "flaky"), "failed", "script_failure", 1)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "running", map[string]string{"flaky": "failed", "unit": "pending"})
		jobapitest.FinishJob(t, inst.URL, jobapitest.TakeJobNamed(t, inst, token, "unit"), "success", "", 0)
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "success", map[string]string{"flaky": "failed", "unit": "success"})
	})

	t.Run("job retry rule retries a script failure", func(t *testing.T) {
		p := inst.CreatePipeline(t, 5, stages,
			jobapitest.Job{"name": "flaky", "stage": "build", "script": "x", "retry": map[string]any{"max": 1, "when": []string{"script_failure"}}},
			jobapitest.Job{"name": "unit", "stage": "test", "script": "x"})
		first := jobapitest.TakeJobNamed(t, inst, token, "flaky")
		jobapitest.FinishJob(t, inst.URL, first, "failed", "script_failure", 1)
		second := jobapitest.TakeJobNamed(t, inst, token, "flaky")
		if d := inst.Job(t, 5, second.ID); d.Attempt != 2 || d.RetryOf == nil || *d.RetryOf != first.ID {
			t.Errorf("automatic retry %+v", d)
		}
		if second.Token == first.Token {
			t.Error("the retry reuses the old job token")
		}
		// The old attempt's token is fenced off.
		resp, b := jobapitest.UpdateJob(t, inst.URL, first.ID, first.Token, map[string]any{"state": "running"})
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
		jobapitest.WantJobStatus(t, resp, "failed")
		jobapitest.FinishJob(t, inst.URL, second, "failed", "script_failure", 1)
		// Limit reached: stays failed, later stages skipped.
		jobapitest.WantStatuses(t, inst.Pipeline(t, p), "failed", map[string]string{"flaky": "failed", "unit": "skipped"})
		if ev := jobapitest.EventTypes(inst.Events(t, 5, second.ID)); !strings.Contains(ev, "retry_exhausted") {
			t.Errorf("events of the last attempt %s, want retry_exhausted", ev)
		}
	})
}

func TestPipelineInvalidDefinitions(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	job := func(kv ...any) map[string]any {
		j := map[string]any{"name": "a", "stage": "test", "script": []string{"x"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(j, kv[i].(string))
			} else {
				j[kv[i].(string)] = kv[i+1]
			}
		}
		return j
	}
	def := func(jobs ...map[string]any) map[string]any {
		return map[string]any{"stages": []string{"build", "test"}, "jobs": jobs}
	}
	cases := []struct {
		name string
		body any
		want string // part of the message
	}{
		{"no jobs", def(), "at least one job"},
		{"jobs missing", map[string]any{"stages": []string{"test"}}, "at least one job"},
		{"stage not in stages", def(job("stage", "deploy")), "not in stages"},
		{"default stage absent", map[string]any{"stages": []string{"build"}, "jobs": []any{job("stage", nil)}}, "not in stages"},
		{"empty script list", def(job("script", []string{})), "script"},
		{"no script", def(job("script", nil)), "script"},
		{"empty name", def(job("name", "")), "name"},
		{"long name", def(job("name", strings.Repeat("n", 256))), "longer"},
		{"duplicate names", def(job(), job("stage", "build")), "used twice"},
		{"duplicate stages", map[string]any{"stages": []string{"a", "a"}, "jobs": []any{job("stage", "a")}}, "twice"},
		{"empty stage name", map[string]any{"stages": []string{""}, "jobs": []any{job()}}, "stage"},
		{"unknown top-level field", map[string]any{"stages": []string{"test"}, "jobs": []any{job()}, "stagez": 1}, "stagez"},
		{"unknown job field", def(job("scrpt", "x")), "scrpt"},
		{"bad variable name", def(job("variables", map[string]any{"1BAD": "x"})), "variable name"},
		{"variable name with dash", def(job("variables", map[string]any{"A-B": "x"})), "variable name"},
		{"empty variable name", def(job("variables", map[string]any{"": "x"})), "variable name"},
		{"variable of wrong type", def(job("variables", map[string]any{"A": []int{1}})), "variable"},
		{"variable object without value", def(job("variables", map[string]any{"A": map[string]any{"masked": true}})), "variable"},
		{"script of wrong type", def(job("script", 5)), "script"},
		{"stages of wrong type", map[string]any{"stages": "test", "jobs": []any{job()}}, "stages"},
		{"jobs of wrong type", map[string]any{"jobs": map[string]any{"a": 1}}, "jobs"},
		{"allow_failure string", def(job("allow_failure", "yes")), "allow_failure"},
		{"tags of wrong type", def(job("tags", "docker")), "tags"},
		{"empty tag", def(job("tags", []string{""})), "tags"},
		{"negative timeout", def(job("timeout", -5)), "timeout"},
		{"zero timeout", def(job("timeout", 0)), "timeout"},
		{"timeout over 30 days", def(job("timeout", 31*24*3600)), "timeout"},
		{"timeout garbage", def(job("timeout", "soon")), "timeout"},
		{"timeout overflow", def(job("timeout", 1e30)), "timeout"},
		{"retry too high", def(job("retry", 11)), "retry"},
		{"retry negative", def(job("retry", map[string]any{"max": -1})), "retry"},
		{"retry unknown reason", def(job("retry", map[string]any{"max": 1, "when": []string{"bogus"}})), "retry"},
		{"retry unknown key", def(job("retry", map[string]any{"max": 1, "if": "x"})), "retry"},
		{"timeout_strategy unknown", map[string]any{"stages": []string{"test"}, "jobs": []any{job()}, "timeout_strategy": "sometimes"}, "timeout_strategy"},
		{"bad sha", map[string]any{"stages": []string{"test"}, "jobs": []any{job()}, "sha": "xyz"}, "sha"},
		{"long ref", map[string]any{"stages": []string{"test"}, "jobs": []any{job()}, "ref": strings.Repeat("r", 300)}, "ref"},
		{"not an object", []any{1, 2}, ""},
		{"null", nil, "job"},
		{"malformed", `{"stages": ["test"], "jobs": [`, "JSON"},
		{"trailing garbage", `{"stages": ["test"], "jobs": [{"name": "a", "script": "x"}]} x`, "JSON"},
		{"too many jobs", def(manyJobs(5001)...), "5000"},
		{"script line too long", def(job("script", []string{strings.Repeat("x", 65<<10)})), "longer"},
	}
	before := jobapitest.RowCounts(t, inst)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			if body == nil {
				body = "null"
			}
			resp, b := inst.Do(t, "POST", "/api/v4/projects/9/pipeline", body)
			msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
			if !strings.Contains(strings.ToLower(msg), strings.ToLower(c.want)) {
				t.Errorf("message %q does not mention %q", msg, c.want)
			}
		})
	}
	// A form body is refused: a definition must be JSON.
	resp, b := inst.Do(t, "POST", "/api/v4/projects/9/pipeline", "jobs=a", "Content-Type", "application/x-www-form-urlencoded")
	if resp.StatusCode != http.StatusUnsupportedMediaType && resp.StatusCode != http.StatusBadRequest {
		t.Errorf("form definition: %d %s", resp.StatusCode, b)
	}
	if after := jobapitest.RowCounts(t, inst); !jobapitest.SameCounts(before, after) {
		t.Errorf("invalid definitions wrote rows: %v → %v", before, after)
	}
	// The same endpoint accepts a valid definition, with .gitlab-ci.yml's spellings.
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects/9/pipeline", map[string]any{
		"ref": "feature/x", "sha": strings.Repeat("ab", 20), "timeout_strategy": "optimistic",
		"jobs": []any{job("stage", nil, "script", "one line", "timeout", "2h", "retry", 2,
			"variables", map[string]any{"N": 5, "M": map[string]any{"value": "v", "masked": true}})},
	}, &p)
	if p.Status != "pending" || p.Ref != "feature/x" || p.TimeoutStrategy != "optimistic" || len(p.Stages) != 3 {
		t.Errorf("pipeline with defaults %+v", p)
	}
}

func manyJobs(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"name": fmt.Sprintf("j%d", i), "stage": "test", "script": "x"}
	}
	return out
}

// TestPipelineJobsArePaged: GET /pipelines/:id/jobs pages like every list endpoint, in
// stage order, with GitLab's headers; a page past the end is empty, not an error.
func TestPipelineJobsArePaged(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var jobs []jobapitest.Job
	for i := 0; i < 25; i++ {
		stage := "build"
		if i >= 20 {
			stage = "test"
		}
		jobs = append(jobs, jobapitest.Job{"name": fmt.Sprintf("job-%02d", i), "stage": stage, "script": "true"})
	}
	p := inst.CreatePipeline(t, 3, []string{"build", "test"}, jobs...)
	path := fmt.Sprintf("/api/v4/projects/3/pipelines/%d/jobs", p.ID)

	var seen []string
	for _, c := range []struct {
		query      string
		n          int
		page, next string
	}{
		{"", 20, "1", "2"},
		{"?page=2", 5, "2", ""},
		{"?page=3", 0, "3", ""},
		{"?per_page=10&page=3", 5, "3", ""},
	} {
		res, body := inst.Do(t, "GET", path+c.query, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", c.query, res.StatusCode, body)
		}
		var got []api.JobDetail
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != c.n || res.Header.Get("X-Total") != "25" || res.Header.Get("X-Page") != c.page ||
			res.Header.Get("X-Next-Page") != c.next {
			t.Errorf("%q: %d jobs, X-Total %q, X-Page %q, X-Next-Page %q; want %d, 25, %s, %q", c.query, len(got),
				res.Header.Get("X-Total"), res.Header.Get("X-Page"), res.Header.Get("X-Next-Page"), c.n, c.page, c.next)
		}
		if c.query == "" || c.query == "?page=2" {
			for _, j := range got {
				seen = append(seen, j.Name)
			}
		}
	}
	for i, name := range seen {
		if want := fmt.Sprintf("job-%02d", i); name != want {
			t.Fatalf("job %d across pages is %s, want %s: pages must follow stage order", i, name, want)
		}
	}
	if res, _ := inst.Do(t, "GET", path+"?per_page=0", nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("per_page=0: %d, want 400", res.StatusCode)
	}
}

// TestPipelineOrigin: a pipeline's source, before_sha, iid and own variables, over HTTP:
// iids count per project (a refused definition takes none), the answer names the variables
// without their values, and the job sees them above project and job variables.
func TestPipelineOrigin(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app"}, &project)
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", project.ID),
		map[string]any{"key": "TARGET", "value": "project"}, nil)
	before := strings.Repeat("ab", 20)
	post := func(projectID int64, body map[string]any) api.Pipeline {
		t.Helper()
		body["stages"] = []string{"test"}
		body["jobs"] = []map[string]any{{"name": "a", "script": "x", "variables": map[string]any{"TARGET": "job", "JOB": "1"}}}
		var p api.Pipeline
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", projectID), body, &p)
		return p
	}

	first := post(project.ID, map[string]any{})
	if first.IID != 1 || first.Source != "api" || first.BeforeSha != strings.Repeat("0", 40) || len(first.Variables) != 0 {
		t.Errorf("first pipeline: iid %d source %q before_sha %q variables %v", first.IID, first.Source, first.BeforeSha, first.Variables)
	}
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID),
		map[string]any{"stages": []string{"test"}, "jobs": []map[string]any{{"name": "a", "script": "x"}}, "source": "cron"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	second := post(project.ID, map[string]any{"source": "push", "before_sha": before,
		"variables": map[string]any{"TARGET": "pipeline-secret-value", "PORT": 8080}})
	other := post(project.ID+1, map[string]any{}) // an implicit project counts on its own
	if second.IID != 2 || other.IID != 1 {
		t.Errorf("iids %d (second of the project) and %d (first of another), want 2 and 1", second.IID, other.IID)
	}

	resp, raw := inst.Do(t, "GET", jobapitest.PipelinePath(project.ID, second.ID), nil)
	jobapitest.WantStatus(t, resp, raw, http.StatusOK)
	shown := jobapitest.Decode[api.Pipeline](t, raw)
	if shown.Source != "push" || shown.BeforeSha != before || shown.IID != 2 ||
		fmt.Sprint(shown.Variables) != "[{PORT env_var} {TARGET env_var}]" {
		t.Errorf("pipeline shows source %q before_sha %q iid %d variables %v", shown.Source, shown.BeforeSha, shown.IID, shown.Variables)
	}
	if strings.Contains(string(raw), "pipeline-secret-value") {
		t.Errorf("the pipeline answer shows a variable's value: %s", raw)
	}

	jobapitest.TakeJob(t, inst.URL, token) // the first pipeline's job
	job := jobapitest.TakeJob(t, inst.URL, token)
	vars := jobapitest.JobVariables(job)
	for k, want := range map[string]string{"TARGET": "pipeline-secret-value", "PORT": "8080", "JOB": "1",
		"CI_PIPELINE_SOURCE": "push", "CI_PIPELINE_IID": "2", "CI_COMMIT_BEFORE_SHA": before} {
		if vars[k].Value != want {
			t.Errorf("%s = %q, want %q", k, vars[k].Value, want)
		}
	}
	if v := vars["TARGET"]; v.Public || v.Masked {
		t.Errorf("pipeline variable TARGET %+v: want neither public nor masked, as GitLab sends them", v)
	}
	if job.GitInfo.BeforeSha != before {
		t.Errorf("git_info.before_sha %q, want %q", job.GitInfo.BeforeSha, before)
	}
}
