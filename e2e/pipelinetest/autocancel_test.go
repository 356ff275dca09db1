package pipelinetest_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
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
		resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": ref, "sha": sha, "ci_config": yaml})
		jobapitest.WantStatus(t, resp, b, http.StatusCreated)
		return jobapitest.Decode[api.Pipeline](t, b)
	}
	show := func(id int64) api.Pipeline {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/pipelines/%d", jobapitest.ProjectPath(proj.ID), id), nil, &p)
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
	got := jobapitest.JobStatuses(show(p1.ID))
	if got["build"] != "canceling" && got["build"] != "canceled" || got["deploy"] != "canceled" {
		t.Errorf("p1 after p2: jobs %v, want build canceling and deploy canceled", got)
	}

	// 2. p2's lint runs and is not interruptible: p3 leaves p2 alone.
	r.TakeNamed(t, "lint")
	p3 := create("main", sha('3'), plain)
	if got := jobapitest.JobStatuses(show(p2.ID)); got["lint"] != "running" {
		t.Errorf("p2 after p3: jobs %v, want lint running (started, uninterruptible)", got)
	}

	// 3. p3 has not started anything: a pipeline on another ref, and one for p3's own commit,
	// leave it; one for a new commit of main cancels it, uninterruptible as its lint is.
	create("feature", sha('4'), plain)
	create("main", sha('3'), plain)
	if got := jobapitest.JobStatuses(show(p3.ID)); got["lint"] != "pending" {
		t.Errorf("p3 after pipelines on another ref and on its own commit: jobs %v, want lint pending", got)
	}
	create("main", sha('5'), plain)
	if p := show(p3.ID); p.Status != "canceled" || jobapitest.JobStatuses(p)["lint"] != "canceled" {
		t.Errorf("p3 after a new commit on main: %s, jobs %v; want canceled", p.Status, jobapitest.JobStatuses(p))
	}
	if got := jobapitest.JobStatuses(show(p2.ID)); got["lint"] != "running" {
		t.Errorf("p2 after a new commit on main: jobs %v, want lint still running", got)
	}

	// 4. The JSON form (jobapi's own pipelines) does not auto-cancel.
	p6 := create("json-ref", sha('6'), plain)
	var p7 api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "json-ref", "sha": sha('7'),
		"stages": []string{"test"}, "jobs": []map[string]any{{"name": "x", "stage": "test", "script": []string{"true"}}}}, &p7)
	if got := jobapitest.JobStatuses(show(p6.ID)); got["lint"] != "pending" {
		t.Errorf("p6 after a JSON pipeline on its ref: jobs %v, want lint pending", got)
	}
}

// TestAutoCancelOnNewCommit: the older pipeline's own workflow:auto_cancel:on_new_commit
// decides. interruptible cancels its interruptible jobs even though an uninterruptible one
// has started (that one runs on, and its runner is not told to stop); none is never
// canceled; a matching workflow rule's setting is the one the pipeline keeps.
func TestAutoCancelOnNewCommit(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "onc", "default_branch": "main"}, &proj)
	create := func(ref, sha, yaml string) api.Pipeline {
		t.Helper()
		resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": ref, "sha": sha, "ci_config": yaml})
		jobapitest.WantStatus(t, resp, b, http.StatusCreated)
		return jobapitest.Decode[api.Pipeline](t, b)
	}
	show := func(id int64) api.Pipeline {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/pipelines/%d", jobapitest.ProjectPath(proj.ID), id), nil, &p)
		return p
	}
	sha := func(c byte) string { return strings.Repeat(string(c), 40) }
	const plain = "lint: {script: make lint, tags: [other]}\n"
	r := inst.NewRunner(t)

	// 1. interruptible: slow (uninterruptible) and quick (interruptible) run; p2 cancels
	// quick and the interruptible later job, and leaves slow and the uninterruptible later one.
	p1 := create("main", sha('1'), `
workflow: {auto_cancel: {on_new_commit: interruptible}}
stages: [test, deploy]
slow: {stage: test, script: make slow}
quick: {stage: test, script: make quick, interruptible: true}
later: {stage: deploy, script: make later, interruptible: true}
ship: {stage: deploy, script: make ship}
`)
	jobs := r.TakeAll(t, 2)
	create("main", sha('2'), plain)
	want := map[string]string{"slow": "running", "quick": "canceling", "later": "canceled", "ship": "created"}
	if got := jobapitest.JobStatuses(show(p1.ID)); !maps.Equal(got, want) {
		t.Errorf("p1 (interruptible) after a new commit: %v, want %v", got, want)
	}
	jobapitest.WantUpdate(t, "quick's runner after the auto-cancel",
		r.Put(t, jobs["quick"], runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "canceling")
	jobapitest.WantUpdate(t, "slow's runner after the auto-cancel",
		r.Put(t, jobs["slow"], runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "running")

	// 2. none, here from the first matching workflow rule over workflow's conservative: a new
	// commit leaves the pipeline whole, though nothing in it has started.
	const ruled = `
workflow:
  auto_cancel: {on_new_commit: conservative}
  rules:
    - if: $CI_COMMIT_BRANCH == "release"
      auto_cancel: {on_new_commit: none}
    - when: always
build: {script: make, tags: [other], interruptible: true}
`
	p3 := create("release", sha('3'), ruled)
	create("release", sha('4'), ruled)
	if got := jobapitest.JobStatuses(show(p3.ID)); got["build"] != "pending" {
		t.Errorf("p3 (none) after a new commit: %v, want build pending", got)
	}
	// The same file on another branch keeps workflow's conservative: canceled whole.
	p5 := create("dev", sha('5'), ruled)
	create("dev", sha('6'), ruled)
	if p := show(p5.ID); p.Status != "canceled" {
		t.Errorf("p5 (conservative) after a new commit: %s %v, want canceled", p.Status, jobapitest.JobStatuses(p))
	}
}

// TestAutoCancelOnJobFailure: with on_job_failure: all, a job that fails for good cancels
// the rest of its pipeline at once, through the pipeline cancel path (a running job's runner
// is told at its next update); a failure allowed by allow_failure, and one that is retried,
// cancel nothing.
func TestAutoCancelOnJobFailure(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "ojf", "default_branch": "main"}, &proj)
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "main", "sha": strings.Repeat("a", 40),
		"ci_config": `
workflow: {auto_cancel: {on_job_failure: all}}
stages: [test, deploy]
unit: {stage: test, script: make unit}
flaky: {stage: test, script: make flaky, retry: 1}
lint: {stage: test, script: make lint, allow_failure: true}
e2e: {stage: test, script: make e2e}
waiting: {stage: test, script: make later, tags: [nobody]}
deploy: {stage: deploy, script: make deploy}
`})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p := jobapitest.Decode[api.Pipeline](t, b)
	r := inst.NewRunner(t)
	jobs := r.TakeAll(t, 4)
	show := func() map[string]string { t.Helper(); return jobapitest.JobStatuses(inst.Pipeline(t, p)) }

	r.Finish(t, jobs["lint"], runnerclient.StateFailed, "script_failure")
	r.Finish(t, jobs["flaky"], runnerclient.StateFailed, "script_failure")
	want := map[string]string{"unit": "running", "flaky": "pending", "lint": "failed", "e2e": "running", "waiting": "pending", "deploy": "created"}
	if got := show(); !maps.Equal(got, want) {
		t.Fatalf("after an allowed failure and a retried one: %v, want %v", got, want)
	}

	r.Finish(t, jobs["unit"], runnerclient.StateFailed, "script_failure")
	want = map[string]string{"unit": "failed", "flaky": "canceled", "lint": "failed", "e2e": "canceling", "waiting": "canceled", "deploy": "canceled"}
	if got := show(); !maps.Equal(got, want) {
		t.Fatalf("after unit failed: %v, want %v", got, want)
	}
	jobapitest.WantUpdate(t, "e2e's runner after the auto-cancel",
		r.Put(t, jobs["e2e"], runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "canceling")
	r.Finish(t, jobs["e2e"], runnerclient.StateFailed, "script_failure")
	if got := inst.Pipeline(t, p); got.Status != "failed" || jobapitest.JobStatuses(got)["e2e"] != "canceled" {
		t.Errorf("the pipeline once e2e's runner stopped: %s %v, want failed with e2e canceled", got.Status, jobapitest.JobStatuses(got))
	}
	if n, err := inst.Failures.Once(t.Context()); err != nil || n != 0 {
		t.Errorf("the pass after the immediate cancel: %d, %v; want nothing to do", n, err)
	}

	// Without the setting, a failure cancels nothing.
	resp, b = inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "main", "sha": strings.Repeat("b", 40),
		"ci_config": "a: {script: x, tags: [plain]}\nb: {script: y, tags: [plain]}\n"})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	plain := jobapitest.Decode[api.Pipeline](t, b)
	rp := inst.NewRunner(t, "plain")
	pj := rp.TakeAll(t, 2)
	rp.Finish(t, pj["a"], runnerclient.StateFailed, "script_failure")
	if got := jobapitest.JobStatuses(inst.Pipeline(t, plain)); got["b"] != "running" {
		t.Errorf("on_job_failure: none (the default): %v, want b running", got)
	}
}

// TestAutoCancelOnJobFailurePass: a failure that does not come from a runner's update (here
// its runner is deleted, which fails its jobs in the store) is left to the pass, which
// cancels the pipeline's other jobs; a second pass finds nothing.
func TestAutoCancelOnJobFailurePass(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "pass", "default_branch": "main"}, &proj)
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "main", "sha": strings.Repeat("a", 40),
		"ci_config": `
workflow: {rules: [{auto_cancel: {on_job_failure: all}}]}
stages: [test, deploy]
doomed: {stage: test, script: x, tags: [doomed]}
other: {stage: test, script: y, tags: [other]}
deploy: {stage: deploy, script: z}
`})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p := jobapitest.Decode[api.Pipeline](t, b)
	id, token := inst.CreateRunner(t, "doomed")
	doomedRunner := jobapitest.NewRunner(t, inst.URL, token, "s_doomed")
	doomedRunner.TakeNamed(t, "doomed")
	otherRunner := inst.NewRunner(t, "other")
	other := otherRunner.TakeNamed(t, "other")
	inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/runners/%d", id), nil, nil)
	want := map[string]string{"doomed": "failed", "other": "running", "deploy": "created"}
	if got := jobapitest.JobStatuses(inst.Pipeline(t, p)); !maps.Equal(got, want) {
		t.Fatalf("after the runner's delete, before the pass: %v, want %v", got, want)
	}
	if n, err := inst.Failures.Once(t.Context()); err != nil || n != 1 {
		t.Fatalf("the pass: %d, %v; want the pipeline canceled", n, err)
	}
	want = map[string]string{"doomed": "failed", "other": "canceling", "deploy": "canceled"}
	if got := jobapitest.JobStatuses(inst.Pipeline(t, p)); !maps.Equal(got, want) {
		t.Errorf("after the pass: %v, want %v", got, want)
	}
	jobapitest.WantUpdate(t, "other's runner after the pass",
		otherRunner.Put(t, other, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "canceling")
	if n, err := inst.Failures.Once(t.Context()); err != nil || n != 0 {
		t.Errorf("a second pass: %d, %v; want nothing left", n, err)
	}
}

// TestAutoCancelOnJobFailureRace: two replicas take the failures of two jobs of one
// pipeline at the same moment, each then canceling the pipeline. Both updates are taken
// (200; the later one may find its job canceling already and end it canceled), every other
// job is canceled once, the pipeline ends failed, and no cancel is left to the pass.
func TestAutoCancelOnJobFailureRace(t *testing.T) {
	t.Parallel()
	a := jobapitest.Start(t, jobapitest.Options{})
	b := a.Replica(t, jobapitest.Options{})
	var proj api.Project
	a.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "race", "default_branch": "main"}, &proj)
	for round := range 8 {
		resp, body := a.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": fmt.Sprintf("r%d", round),
			"sha": strings.Repeat("c", 40), "ci_config": `
workflow: {auto_cancel: {on_job_failure: all}}
stages: [test, deploy]
one: {stage: test, script: x}
two: {stage: test, script: x}
three: {stage: test, script: x}
four: {stage: test, script: x, tags: [nobody]}
deploy: {stage: deploy, script: x}
`})
		jobapitest.WantStatus(t, resp, body, http.StatusCreated)
		p := jobapitest.Decode[api.Pipeline](t, body)
		ra, rb := a.NewRunner(t), b.NewRunner(t)
		one, two := ra.TakeNamed(t, "one"), rb.TakeNamed(t, "two")
		three := ra.TakeNamed(t, "three")
		results := make([]runnerclient.UpdateResult, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, x := range []struct {
			r   *jobapitest.Runner
			job *runnerclient.Job
		}{{ra, one}, {rb, two}} {
			wg.Go(func() {
				<-start
				results[i], errs[i] = x.r.UpdateJob(context.Background(), x.job, runnerclient.StateFailed,
					runnerclient.UpdateOptions{FailureReason: "script_failure", ExitCode: 1})
			})
		}
		close(start)
		wg.Wait()
		for i, res := range results {
			if errs[i] != nil || res.Code != http.StatusOK || (res.JobStatus != "failed" && res.JobStatus != "canceled") {
				t.Fatalf("round %d: failure %d: %d %q %v", round, i, res.Code, res.JobStatus, errs[i])
			}
		}
		got := jobapitest.JobStatuses(a.Pipeline(t, p))
		failed := 0
		for _, n := range []string{"one", "two"} {
			switch got[n] {
			case "failed":
				failed++
			case "canceled":
			default:
				t.Fatalf("round %d: %s is %s", round, n, got[n])
			}
		}
		if failed == 0 || got["three"] != "canceling" || got["four"] != "canceled" || got["deploy"] != "canceled" {
			t.Fatalf("round %d: %v; want a failure, three canceling, four and deploy canceled", round, got)
		}
		ra.Finish(t, three, runnerclient.StateFailed, "")
		if st := a.Pipeline(t, p).Status; st != "failed" {
			t.Fatalf("round %d: the pipeline ended %s, want failed", round, st)
		}
		if n, err := b.Failures.Once(t.Context()); err != nil || n != 0 {
			t.Fatalf("round %d: the pass found %d (%v); the replicas' own cancels should have done it all", round, n, err)
		}
	}
}
