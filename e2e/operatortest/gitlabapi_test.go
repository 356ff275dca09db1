package operatortest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// gitlabFixture is a project with one finished pipeline at a commit, as a team's scripts
// find it: build (success, with an archive holding out/VERSION), test (failed, allowed to),
// lint failed once and succeeded on its retry; the pipeline succeeded.
type gitlabFixture struct {
	inst     *jobapitest.Instance
	project  api.Project
	sha      string
	pipeline api.Pipeline
	runnerID int64
	// jobs by name; lint is the retry, lintFailed its first attempt.
	build, test, lint, lintFailed int64
}

const fixtureYAML = `stages: [build, test]
variables: {GIT_STRATEGY: none}
build:
  stage: build
  script: make
  artifacts: {paths: [out/]}
test:
  stage: test
  script: make test
  allow_failure: true
lint:
  stage: test
  script: make lint
`

func newGitlabFixture(t *testing.T) *gitlabFixture {
	t.Helper()
	f := &gitlabFixture{inst: jobapitest.Start(t, jobapitest.Options{}), sha: strings.Repeat("ab", 20)}
	f.inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app"}, &f.project)
	var created api.RunnerCreated
	f.inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": "fixture runner", "tag_list": []string{"docker", "linux"}, "run_untagged": true}, &created)
	f.runnerID = created.ID
	r := jobapitest.NewRunner(t, f.inst.URL, created.Token, "s_fixture")
	f.pipeline = f.inst.CreateYAML(t, f.project.ID, f.sha, fixtureYAML)

	build := r.TakeNamed(t, "build")
	res, err := r.UploadArtifacts(context.Background(), build, runnerclient.BytesContent(jobapitest.Zip(t, map[string]string{"out/VERSION": "1.2.3\n"})),
		runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip, Type: runnerclient.ArtifactTypeArchive})
	if err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload build's archive: %+v %v", res, err)
	}
	r.Finish(t, build, runnerclient.StateSuccess, "")
	jobs := r.TakeAll(t, 2)
	r.Finish(t, jobs["test"], runnerclient.StateFailed, "script_failure")
	r.Finish(t, jobs["lint"], runnerclient.StateFailed, "script_failure")
	f.build, f.test, f.lintFailed = build.ID, jobs["test"].ID, jobs["lint"].ID
	var retried api.JobDetail
	f.inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/retry", f.project.ID, f.lintFailed), nil, &retried)
	f.lint = retried.ID
	r.Finish(t, r.TakeNamed(t, "lint"), runnerclient.StateSuccess, "")
	f.pipeline = f.inst.Pipeline(t, f.pipeline)
	if f.pipeline.Status != "success" {
		t.Fatalf("fixture pipeline %s, want success: %+v", f.pipeline.Status, f.pipeline.Jobs)
	}
	return f
}

func (f *gitlabFixture) path(format string, args ...any) string {
	return fmt.Sprintf("/api/v4/projects/%d", f.project.ID) + fmt.Sprintf(format, args...)
}

func jobIDs(jobs []api.JobDetail) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestProjectJobsList: GET /projects/:id/jobs lists every attempt newest first in GitLab's
// job shape, filtered by scope[] or scope (one or several, comma-separated too), paged with
// GitLab's headers; a scope that is not a job state is a 400 naming it, an unknown project a
// 404. A pipeline's jobs filter by scope and hide retried attempts unless include_retried.
func TestProjectJobsList(t *testing.T) {
	t.Parallel()
	f := newGitlabFixture(t)
	var all []api.JobDetail
	f.inst.MustDo(t, http.StatusOK, "GET", f.path("/jobs"), nil, &all)
	if want := []int64{f.lint, f.lintFailed, f.test, f.build}; !slices.Equal(jobIDs(all), want) {
		t.Fatalf("project jobs %v, want every attempt newest first %v", jobIDs(all), want)
	}
	for _, j := range all {
		wantURL := fmt.Sprintf("%s/jobapi/app/-/jobs/%d", f.inst.URL, j.ID)
		if j.WebURL != wantURL || j.Duration == nil || j.QueuedDuration == nil || *j.Duration < 0 || j.Ref != "main" || j.Tag {
			t.Errorf("job %d: web_url %q (want %q), duration %v, queued_duration %v, ref %q tag %v", j.ID, j.WebURL, wantURL, j.Duration, j.QueuedDuration, j.Ref, j.Tag)
		}
		if p := j.Pipeline; p == nil || p.ID != f.pipeline.ID || p.Sha != f.sha || p.Status != "success" || p.Ref != "main" ||
			p.WebURL != fmt.Sprintf("%s/jobapi/app/-/pipelines/%d", f.inst.URL, f.pipeline.ID) {
			t.Errorf("job %d: pipeline %+v", j.ID, j.Pipeline)
		}
		if r := j.Runner; r == nil || r.ID != f.runnerID || r.Description != "fixture runner" || r.Status != "online" || !r.Online || r.RunnerType != "instance_type" {
			t.Errorf("job %d: runner %+v", j.ID, j.Runner)
		}
	}
	if b := all[3]; len(b.Artifacts) != 1 || b.ArtifactsFile == nil || b.ArtifactsFile.Filename != "artifacts.zip" {
		t.Errorf("build's artifacts in the list: %+v %+v", b.Artifacts, b.ArtifactsFile)
	}

	for query, want := range map[string][]int64{
		"?scope[]=failed":                  {f.lintFailed, f.test},
		"?scope[]=success&scope[]=failed":  {f.lint, f.lintFailed, f.test, f.build},
		"?scope=success":                   {f.lint, f.build},
		"?scope=failed,canceled":           {f.lintFailed, f.test},
		"?scope[]=running&scope[]=pending": {},
	} {
		r, body := f.inst.Do(t, "GET", f.path("/jobs%s", query), nil)
		jobapitest.WantStatus(t, r, body, http.StatusOK)
		got := jobapitest.Decode[[]api.JobDetail](t, body)
		if !slices.Equal(jobIDs(got), want) {
			t.Errorf("jobs%s: %v, want %v", query, jobIDs(got), want)
		}
		if r.Header.Get("X-Total") != fmt.Sprint(len(want)) {
			t.Errorf("jobs%s: X-Total %q, want %d", query, r.Header.Get("X-Total"), len(want))
		}
	}
	r, body := f.inst.Do(t, "GET", f.path("/jobs?per_page=3&page=2"), nil)
	jobapitest.WantStatus(t, r, body, http.StatusOK)
	if got := jobIDs(jobapitest.Decode[[]api.JobDetail](t, body)); !slices.Equal(got, []int64{f.build}) ||
		r.Header.Get("X-Total") != "4" || r.Header.Get("X-Page") != "2" || r.Header.Get("X-Next-Page") != "" || r.Header.Get("X-Total-Pages") != "2" {
		t.Errorf("page 2 of 3: %v, headers %v", got, r.Header)
	}

	for path, code := range map[string]int{
		f.path("/jobs?scope[]=failed&scope[]=bogus"): http.StatusBadRequest,
		f.path("/jobs?scope=succeeded"):              http.StatusBadRequest,
		f.path("/jobs?page=0"):                       http.StatusBadRequest,
		"/api/v4/projects/999999/jobs":               http.StatusNotFound,
		"/api/v4/projects/999999/jobs?scope=failed":  http.StatusNotFound,
	} {
		r, body := f.inst.Do(t, "GET", path, nil)
		msg := jobapitest.WantJSONError(t, r, body, code)
		if strings.Contains(path, "bogus") && !strings.Contains(msg, `"bogus"`) || strings.Contains(path, "succeeded") && !strings.Contains(msg, `"succeeded"`) {
			t.Errorf("%s: %q does not name the bad scope", path, msg)
		}
	}

	pj := f.path("/pipelines/%d/jobs", f.pipeline.ID)
	for query, want := range map[string][]int64{
		"":                                   {f.build, f.test, f.lint},
		"?scope=failed":                      {f.test},
		"?scope[]=failed&scope[]=success":    {f.build, f.test, f.lint},
		"?scope=failed&include_retried=true": {f.test, f.lintFailed},
		"?include_retried=true":              {f.build, f.test, f.lintFailed, f.lint},
	} {
		var got []api.JobDetail
		f.inst.MustDo(t, http.StatusOK, "GET", pj+query, nil, &got)
		if !slices.Equal(jobIDs(got), want) {
			t.Errorf("pipeline jobs%s: %v, want %v", query, jobIDs(got), want)
		}
		for _, j := range got {
			if j.WebURL == "" || j.Pipeline == nil || j.Duration == nil {
				t.Errorf("pipeline jobs%s: job %d lacks GitLab's fields: %+v", query, j.ID, j)
			}
		}
	}
	r, body = f.inst.Do(t, "GET", pj+"?scope=bogus", nil)
	if msg := jobapitest.WantJSONError(t, r, body, http.StatusBadRequest); !strings.Contains(msg, `"bogus"`) {
		t.Errorf("pipeline jobs ?scope=bogus: %q", msg)
	}
	r, body = f.inst.Do(t, "GET", pj+"?include_retried=maybe", nil)
	jobapitest.WantJSONError(t, r, body, http.StatusBadRequest)

	one := f.inst.Job(t, f.project.ID, f.test)
	if one.WebURL == "" || one.Pipeline == nil || one.Duration == nil || one.Runner == nil || one.Runner.Status != "online" {
		t.Errorf("GET job: %+v", one)
	}
	r, body = f.inst.Do(t, "HEAD", f.path("/jobs/%d/trace", f.test), nil)
	jobapitest.WantStatus(t, r, body, http.StatusOK)
	if len(body) != 0 || r.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("HEAD trace: %d bytes, %s", len(body), r.Header.Get("Content-Type"))
	}
	r, body = f.inst.Do(t, "HEAD", f.path("/jobs/999999/trace"), nil)
	jobapitest.WantStatus(t, r, body, http.StatusNotFound)
}

// TestRunnerLists: GET /runners/all and /projects/:id/runners in GitLab's short form, with
// GitLab's status (online once it asked for a job, never_contacted before) and its filters
// (type, status, paused, tag_list), which GET /runners takes too; bad values are 400s naming
// the parameter, and an unknown project a 404.
func TestRunnerLists(t *testing.T) {
	t.Parallel()
	f := newGitlabFixture(t)
	var idle api.RunnerCreated
	f.inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": "idle", "tag_list": []string{"linux"}, "paused": true}, &idle)
	ids := func(list []api.ListedRunner) []int64 {
		out := make([]int64, len(list))
		for i, r := range list {
			out[i] = r.ID
		}
		return out
	}
	var all []api.ListedRunner
	f.inst.MustDo(t, http.StatusOK, "GET", "/api/v4/runners/all", nil, &all)
	if !slices.Equal(ids(all), []int64{f.runnerID, idle.ID}) {
		t.Fatalf("runners/all: %v", ids(all))
	}
	if r := all[0]; r.Status != "online" || !r.Online || !r.Active || r.Paused || !r.IsShared || r.RunnerType != "instance_type" ||
		r.ContactedAt == nil || r.IPAddress == "" || !slices.Equal(r.TagList, []string{"docker", "linux"}) {
		t.Errorf("the fixture's runner: %+v", r)
	}
	if r := all[1]; r.Status != "never_contacted" || r.Online || r.Active || !r.Paused || r.ContactedAt != nil {
		t.Errorf("the idle runner: %+v", r)
	}
	// GET /runners takes the same filters and keeps its full form, managers included.
	var owned []api.Runner
	f.inst.MustDo(t, http.StatusOK, "GET", "/api/v4/runners?status=online", nil, &owned)
	if len(owned) != 1 || owned[0].ID != f.runnerID || len(owned[0].Managers) != 1 || owned[0].Managers[0].SystemID != "s_fixture" {
		t.Errorf("GET /runners?status=online: %+v, want the fixture's runner with its manager", owned)
	}
	for _, base := range []string{"/api/v4/runners/all", f.path("/runners"), "/api/v4/runners"} {
		for query, want := range map[string][]int64{
			"?status=online":              {f.runnerID},
			"?status=never_contacted":     {idle.ID},
			"?status=offline":             {},
			"?paused=true":                {idle.ID},
			"?paused=false&status=online": {f.runnerID},
			"?scope=paused":               {idle.ID},
			"?tag_list=linux":             {f.runnerID, idle.ID},
			"?tag_list=docker,linux":      {f.runnerID},
			"?type=instance_type":         {f.runnerID, idle.ID},
			"?type=project_type":          {},
			"?status=active&paused=true":  {},
			"?per_page=1&page=2":          {idle.ID},
		} {
			r, body := f.inst.Do(t, "GET", base+query, nil)
			jobapitest.WantStatus(t, r, body, http.StatusOK)
			if got := ids(jobapitest.Decode[[]api.ListedRunner](t, body)); !slices.Equal(got, want) {
				t.Errorf("%s%s: %v, want %v", base, query, got, want)
			}
		}
		for query, name := range map[string]string{"?status=busy": "status", "?type=shared": "type", "?paused=perhaps": "paused", "?scope=gone": "scope"} {
			r, body := f.inst.Do(t, "GET", base+query, nil)
			if msg := jobapitest.WantJSONError(t, r, body, http.StatusBadRequest); !strings.Contains(msg, name) {
				t.Errorf("%s%s: %q does not name %s", base, query, msg, name)
			}
		}
	}
	r, body := f.inst.Do(t, "GET", "/api/v4/projects/999999/runners", nil)
	jobapitest.WantJSONError(t, r, body, http.StatusNotFound)
}

// TestCommitStatuses: a commit's statuses are its pipelines' jobs in GitLab's commit status
// shape, oldest first, the latest attempts unless all=true, filtered by ref, stage and name;
// a sha that is not a commit id is a 400, an unknown project a 404.
func TestCommitStatuses(t *testing.T) {
	t.Parallel()
	f := newGitlabFixture(t)
	statuses := func(query string) []api.CommitStatus {
		t.Helper()
		var out []api.CommitStatus
		f.inst.MustDo(t, http.StatusOK, "GET", f.path("/repository/commits/%s/statuses%s", f.sha, query), nil, &out)
		return out
	}
	ids := func(list []api.CommitStatus) []int64 {
		out := make([]int64, len(list))
		for i, s := range list {
			out[i] = s.ID
		}
		return out
	}
	latest := statuses("")
	if !slices.Equal(ids(latest), []int64{f.build, f.test, f.lint}) {
		t.Fatalf("statuses %v, want build, test, lint's retry", ids(latest))
	}
	if s := latest[1]; s.Status != "failed" || !s.AllowFailure || s.Name != "test" || s.Stage != "test" || s.Ref != "main" ||
		s.Sha != f.sha || s.PipelineID != f.pipeline.ID || s.TargetURL != fmt.Sprintf("%s/jobapi/app/-/jobs/%d", f.inst.URL, f.test) ||
		s.StartedAt == nil || s.FinishedAt == nil || s.Author.Username != "admin" {
		t.Errorf("test's status: %+v", s)
	}
	for query, want := range map[string][]int64{
		"?all=true":            {f.build, f.test, f.lintFailed, f.lint},
		"?name=lint&all=true":  {f.lintFailed, f.lint},
		"?stage=build":         {f.build},
		"?ref=main&stage=test": {f.test, f.lint},
		"?ref=other":           {},
		"?per_page=2&page=2":   {f.lint},
	} {
		if got := ids(statuses(query)); !slices.Equal(got, want) {
			t.Errorf("statuses%s: %v, want %v", query, got, want)
		}
	}
	if got := ids(statusesOf(t, f, strings.Repeat("cd", 20))); len(got) != 0 {
		t.Errorf("a commit without pipelines: %v", got)
	}
	for path, code := range map[string]int{
		f.path("/repository/commits/main/statuses"):                         http.StatusBadRequest,
		f.path("/repository/commits/%s/statuses?all=maybe", f.sha):          http.StatusBadRequest,
		"/api/v4/projects/999999/repository/commits/" + f.sha + "/statuses": http.StatusNotFound,
	} {
		r, body := f.inst.Do(t, "GET", path, nil)
		jobapitest.WantJSONError(t, r, body, code)
	}
}

func statusesOf(t *testing.T, f *gitlabFixture, sha string) []api.CommitStatus {
	t.Helper()
	var out []api.CommitStatus
	f.inst.MustDo(t, http.StatusOK, "GET", f.path("/repository/commits/%s/statuses", sha), nil, &out)
	return out
}

// TestUserAndVersion: GET /user is the admin token's holder in GitLab's user shape, GET
// /version names a version and a revision; both need the token.
func TestUserAndVersion(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var u api.User
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/user", nil, &u)
	if u.ID != 1 || u.Username != "admin" || !u.IsAdmin || u.State != "active" || u.WebURL != inst.URL+"/admin" {
		t.Errorf("user: %+v", u)
	}
	var v api.Version
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/version", nil, &v)
	if v.Version == "" || v.Version == "unknown" || v.Revision == "" {
		t.Errorf("version: %+v", v)
	}
	for _, path := range []string{"/api/v4/user", "/api/v4/version", "/api/v4/runners/all"} {
		r, body := jobapitest.Send(t, inst.URL, "GET", path, nil)
		jobapitest.WantJSONError(t, r, body, http.StatusUnauthorized)
	}
}

// TestPythonGitlabLists runs python-gitlab (Debian's python3-gitlab) the way a team's
// script does against the fixture: project jobs by scope, project and instance runners,
// gl.auth()/gl.user, gl.version(), a commit's statuses, artifacts by ref
// (testdata/gitlab_lists.py).
func TestPythonGitlabLists(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	f := newGitlabFixture(t)
	out, err := exec.Command(python, "testdata/gitlab_lists.py", f.inst.URL, jobapitest.AdminToken, fmt.Sprint(f.project.ID), f.sha,
		fmt.Sprint(f.build), fmt.Sprint(f.test), fmt.Sprint(f.lintFailed), fmt.Sprint(f.lint), fmt.Sprint(f.runnerID)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}

// TestArtifactsByRef: GET …/jobs/artifacts/:ref/download?job= and …/raw/*path?job= serve the
// archive of the named job of the newest successful pipeline of the ref; a newer pipeline
// that failed changes nothing. No such job, ref or archive: 404; no job named: 400.
func TestArtifactsByRef(t *testing.T) {
	t.Parallel()
	f := newGitlabFixture(t)
	r, body := f.inst.Do(t, "GET", f.path("/jobs/%d/artifacts", f.build), nil)
	jobapitest.WantStatus(t, r, body, http.StatusOK)
	archive := body

	// A newer pipeline on main whose build uploads another archive, then fails.
	var created api.RunnerCreated
	f.inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners", map[string]any{"description": "second"}, &created)
	run := jobapitest.NewRunner(t, f.inst.URL, created.Token, "s_second")
	f.inst.CreateYAML(t, f.project.ID, strings.Repeat("ef", 20), fixtureYAML)
	build := run.TakeNamed(t, "build")
	res, err := run.UploadArtifacts(context.Background(), build, runnerclient.BytesContent(jobapitest.Zip(t, map[string]string{"out/VERSION": "9.9.9\n"})),
		runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip, Type: runnerclient.ArtifactTypeArchive})
	if err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload: %+v %v", res, err)
	}
	run.Finish(t, build, runnerclient.StateFailed, "script_failure")

	r, body = f.inst.Do(t, "GET", f.path("/jobs/artifacts/main/download?job=build"), nil)
	jobapitest.WantStatus(t, r, body, http.StatusOK)
	if !bytes.Equal(body, archive) || r.Header.Get("Content-Type") != "application/zip" {
		t.Errorf("download by ref: %d bytes (%s), want the successful pipeline's archive of %d", len(body), r.Header.Get("Content-Type"), len(archive))
	}
	r, body = f.inst.Do(t, "GET", f.path("/jobs/artifacts/main/raw/out/VERSION?job=build"), nil)
	jobapitest.WantStatus(t, r, body, http.StatusOK)
	if string(body) != "1.2.3\n" {
		t.Errorf("raw out/VERSION by ref: %q, want the successful pipeline's 1.2.3", body)
	}
	r, body = f.inst.Do(t, "GET", f.path("/jobs/artifacts/main/download?job=build"), nil, "Range", "bytes=0-1")
	jobapitest.WantStatus(t, r, body, http.StatusPartialContent)
	if string(body) != "PK" {
		t.Errorf("range 0-1: %q", body)
	}
	// A ref with a / in its name, encoded or (as python-gitlab 3.x sends it) not.
	resp, body := f.inst.Do(t, "POST", f.path("/pipeline?ref=feature%%2Fx&sha=%s", strings.Repeat("0f", 20)), fixtureYAML,
		"Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, body, http.StatusCreated)
	build = run.TakeNamed(t, "build")
	res, err = run.UploadArtifacts(context.Background(), build, runnerclient.BytesContent(jobapitest.Zip(t, map[string]string{"out/VERSION": "2.0.0\n"})),
		runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip, Type: runnerclient.ArtifactTypeArchive})
	if err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload: %+v %v", res, err)
	}
	run.Finish(t, build, runnerclient.StateSuccess, "")
	for _, j := range run.TakeAll(t, 2) {
		run.Finish(t, j, runnerclient.StateSuccess, "")
	}
	for _, ref := range []string{"feature/x", "feature%2Fx"} {
		r, body := f.inst.Do(t, "GET", f.path("/jobs/artifacts/%s/raw/out/VERSION?job=build", ref), nil)
		jobapitest.WantStatus(t, r, body, http.StatusOK)
		if string(body) != "2.0.0\n" {
			t.Errorf("raw out/VERSION of ref %s: %q", ref, body)
		}
		r, body = f.inst.Do(t, "GET", f.path("/jobs/artifacts/%s/download?job=build", ref), nil)
		jobapitest.WantStatus(t, r, body, http.StatusOK)
	}

	for path, code := range map[string]int{
		f.path("/jobs/artifacts/main/download?job=test"):                 http.StatusNotFound, // no archive
		f.path("/jobs/artifacts/main/download?job=deploy"):               http.StatusNotFound,
		f.path("/jobs/artifacts/other/download?job=build"):               http.StatusNotFound,
		f.path("/jobs/artifacts/main/raw/out/MISSING?job=build"):         http.StatusNotFound,
		f.path("/jobs/artifacts/main/download"):                          http.StatusBadRequest,
		f.path("/jobs/artifacts/main/raw/out/VERSION"):                   http.StatusBadRequest,
		f.path("/jobs/artifacts/a..b/download?job=build"):                http.StatusBadRequest,
		"/api/v4/projects/999999/jobs/artifacts/main/download?job=build": http.StatusNotFound,
	} {
		r, body := f.inst.Do(t, "GET", path, nil)
		jobapitest.WantJSONError(t, r, body, code)
	}
}
