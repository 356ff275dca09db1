package apitest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestAutoCancelRedundantPipelines: a new pipeline from .gitlab-ci.yml cancels the older
// alive pipelines of its ref, for other commits, in which every started job is
// interruptible (GitLab's conservative rule), through the pipeline cancel path.
func TestAutoCancelRedundantPipelines(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "auto", "default_branch": "main"}, &proj)
	create := func(ref, sha, yaml string) api.Pipeline {
		t.Helper()
		resp, b := inst.Do(t, "POST", projectPath(proj.ID)+"/pipeline", map[string]any{"ref": ref, "sha": sha, "ci_config": yaml})
		wantStatus(t, resp, b, http.StatusCreated)
		return decode[api.Pipeline](t, b)
	}
	show := func(id int64) api.Pipeline {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/pipelines/%d", projectPath(proj.ID), id), nil, &p)
		return p
	}
	sha := func(c byte) string { return strings.Repeat(string(c), 40) }
	const interruptibleBuild = `
stages: [build, deploy]
build: {stage: build, script: make, interruptible: true}
deploy: {stage: deploy, script: make deploy}
`
	const plain = "lint: {script: make lint}\n"
	r := inst.NewRunner(t)

	// 1. p1's only started job is interruptible: p2 cancels all of p1, the running build and
	// the deploy that has not started.
	p1 := create("main", sha('1'), interruptibleBuild)
	r.TakeNamed(t, "build")
	p2 := create("main", sha('2'), plain)
	got := jobStatuses(show(p1.ID))
	if got["build"] != "canceling" && got["build"] != "canceled" || got["deploy"] != "canceled" {
		t.Errorf("p1 after p2: jobs %v, want build canceling and deploy canceled", got)
	}

	// 2. p2's lint runs and is not interruptible: p3 leaves p2 alone.
	r.TakeNamed(t, "lint")
	p3 := create("main", sha('3'), plain)
	if got := jobStatuses(show(p2.ID)); got["lint"] != "running" {
		t.Errorf("p2 after p3: jobs %v, want lint running (started, uninterruptible)", got)
	}

	// 3. p3 has not started anything: a pipeline on another ref, and one for p3's own commit,
	// leave it; one for a new commit of main cancels it, uninterruptible as its lint is.
	create("feature", sha('4'), plain)
	create("main", sha('3'), plain)
	if got := jobStatuses(show(p3.ID)); got["lint"] != "pending" {
		t.Errorf("p3 after pipelines on another ref and on its own commit: jobs %v, want lint pending", got)
	}
	create("main", sha('5'), plain)
	if p := show(p3.ID); p.Status != "canceled" || jobStatuses(p)["lint"] != "canceled" {
		t.Errorf("p3 after a new commit on main: %s, jobs %v; want canceled", p.Status, jobStatuses(p))
	}
	if got := jobStatuses(show(p2.ID)); got["lint"] != "running" {
		t.Errorf("p2 after a new commit on main: jobs %v, want lint still running", got)
	}

	// 4. The JSON form (jobapi's own pipelines) does not auto-cancel.
	p6 := create("json-ref", sha('6'), plain)
	var p7 api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", projectPath(proj.ID)+"/pipeline", map[string]any{"ref": "json-ref", "sha": sha('7'),
		"stages": []string{"test"}, "jobs": []map[string]any{{"name": "x", "stage": "test", "script": []string{"true"}}}}, &p7)
	if got := jobStatuses(show(p6.ID)); got["lint"] != "pending" {
		t.Errorf("p6 after a JSON pipeline on its ref: jobs %v, want lint pending", got)
	}
}
