package sourcetest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// sourceCI runs one job whatever started the pipeline and one only for triggered
// pipelines, so that the source reaches both the compiler's rules and the job.
const sourceCI = `
always:
  script: echo "$CI_PIPELINE_SOURCE"
triggered-only:
  rules:
    - if: $CI_PIPELINE_SOURCE == "trigger"
  script: echo "$DEPLOY_TO"
scheduled-only:
  rules:
    - if: $CI_PIPELINE_SOURCE == "schedule"
  script: echo "$NIGHTLY"
`

// repoProject makes a repository whose main holds ci, and a project on it.
func repoProject(t *testing.T, inst *jobapitest.Instance, name, ci string) (project api.Project, sha string) {
	t.Helper()
	m := newMonorepo(t)
	sha = m.Commit(map[string]string{".gitlab-ci.yml": ci})
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": name, "repo_url": "file://" + m.Bare}, &project)
	return project, sha
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %.300s: %v", b, err)
	}
	return v
}

// TestTriggerTokens: a trigger token starts a pipeline of its project from the repository
// at the ref, with CI_PIPELINE_SOURCE trigger and the variables it was given, in every form
// GitLab takes (JSON, urlencoded and multipart forms, the query with the ref in the path);
// the token is shown whole once, then as its last four characters; a running job's
// CI_JOB_TOKEN starts one with source pipeline, and stops when the job ends; a token that
// is unknown, deleted or another project's is a 404, a missing one a 400.
func TestTriggerTokens(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	m := newMonorepo(t)
	sha := m.Commit(map[string]string{".gitlab-ci.yml": sourceCI})
	git(t, m.Work, "push", "--quiet", m.Bare, "HEAD:refs/heads/feature/x")
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare}, &project)
	other, _ := repoProject(t, inst, "other", sourceCI)
	triggers := fmt.Sprintf("/api/v4/projects/%d/triggers", project.ID)

	var created api.Trigger
	inst.MustDo(t, http.StatusCreated, "POST", triggers, map[string]any{"description": "deploy"}, &created)
	token := created.Token
	if !strings.HasPrefix(token, "glptt-") || len(token) < 30 || created.Description != "deploy" {
		t.Fatalf("created trigger %+v, want a whole glptt- token", created)
	}
	// Made with the admin token: its owner is the admin token's holder, GitLab's user 1.
	if created.Owner == nil || created.Owner.ID != 1 || created.Owner.Username != "admin" {
		t.Errorf("created trigger's owner = %+v, want the admin (user 1)", created.Owner)
	}
	resp, b := inst.Do(t, "GET", triggers, nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	list := decode[[]api.Trigger](t, b)
	if len(list) != 1 || list[0].Token != token[len(token)-4:] || list[0].ID != created.ID || list[0].LastUsed != nil || resp.Header.Get("X-Total") != "1" {
		t.Fatalf("list %+v (X-Total %s), want the trigger with its token's last 4 characters, never used", list, resp.Header.Get("X-Total"))
	}
	var got api.Trigger
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/%d", triggers, created.ID), nil, &got)
	if got.Token != token[len(token)-4:] {
		t.Errorf("GET shows token %q, want its last 4 characters", got.Token)
	}
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("%s/%d", triggers, created.ID), map[string]any{"description": "deploy v2"}, &got)
	if got.Description != "deploy v2" {
		t.Errorf("PUT description: %+v", got)
	}
	resp, b = inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/triggers", other.ID), url.Values{"description": {"theirs"}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	otherTrigger := decode[api.Trigger](t, b)

	run := fmt.Sprintf("/api/v4/projects/%d/trigger/pipeline", project.ID)
	check := func(what string, resp *http.Response, b []byte, wantVars map[string]string) api.Pipeline {
		t.Helper()
		jobapitest.WantStatus(t, resp, b, http.StatusCreated)
		p := decode[api.Pipeline](t, b)
		if p.Source != "trigger" || p.Ref != "main" || p.Sha != sha || strings.Join(jobNames(p), ",") != "always,triggered-only" {
			t.Fatalf("%s: pipeline %+v (jobs %s), want source trigger on main at %s with always and triggered-only", what, p, strings.Join(jobNames(p), ","), sha)
		}
		keys := map[string]bool{}
		for _, v := range p.Variables {
			keys[v.Key] = true
		}
		for k := range wantVars {
			if !keys[k] {
				t.Errorf("%s: pipeline variables %+v lack %s", what, p.Variables, k)
			}
		}
		return p
	}
	// JSON, as python-gitlab sends it.
	resp, b = jobapitest.Send(t, inst.URL, "POST", run, map[string]any{"token": token, "ref": "main", "variables": map[string]string{"DEPLOY_TO": "staging"}})
	first := check("JSON", resp, b, map[string]string{"DEPLOY_TO": "staging"})
	// A urlencoded form, as curl -d sends it.
	resp, b = jobapitest.Send(t, inst.URL, "POST", run, url.Values{"token": {token}, "ref": {"main"}, "variables[DEPLOY_TO]": {"prod"}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded")
	check("form", resp, b, map[string]string{"DEPLOY_TO": "prod"})
	// A multipart form, as curl -F sends it (GitLab's documented call).
	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	for k, v := range map[string]string{"token": token, "ref": "main", "variables[DEPLOY_TO]": "qa"} {
		_ = w.WriteField(k, v)
	}
	_ = w.Close()
	resp, b = jobapitest.Send(t, inst.URL, "POST", run, mp.Bytes(), "Content-Type", w.FormDataContentType())
	check("multipart", resp, b, map[string]string{"DEPLOY_TO": "qa"})
	// The webhook form: the ref in the path, the token in the query.
	resp, b = jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/ref/main/trigger/pipeline?token=%s&variables[DEPLOY_TO]=web", project.ID, token), nil)
	check("ref in the path", resp, b, map[string]string{"DEPLOY_TO": "web"})
	// A branch with a slash, percent-encoded in the path, and an empty body that says JSON.
	resp, b = jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/ref/feature%%2Fx/trigger/pipeline?token=%s", project.ID, token), nil,
		"Content-Type", "application/json")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if p := decode[api.Pipeline](t, b); p.Ref != "feature/x" || p.Source != "trigger" {
		t.Errorf("ref feature%%2Fx in the path: pipeline on %q (source %s), want feature/x", p.Ref, p.Source)
	}

	inst.MustDo(t, http.StatusOK, "GET", triggers, nil, &list)
	if len(list) != 1 || list[0].LastUsed == nil {
		t.Errorf("after use: %+v, want last_used set", list)
	}

	// The first pipeline's jobs come first; its "always" job ends, its triggered one runs on.
	r := inst.NewRunner(t)
	var job *runnerclient.Job
	for job == nil {
		j := r.Take(t)
		if v, _ := j.Variable("CI_PIPELINE_SOURCE"); v != "trigger" || j.JobInfo.PipelineID != first.ID {
			t.Fatalf("took job %q of pipeline %d with CI_PIPELINE_SOURCE %q, want the first pipeline's, trigger", j.JobInfo.Name, j.JobInfo.PipelineID, v)
		}
		if j.JobInfo.Name != "triggered-only" {
			r.Finish(t, j, "success", "")
			continue
		}
		job = j
	}
	if v, _ := job.Variable("DEPLOY_TO"); v != "staging" {
		t.Errorf("DEPLOY_TO = %q, want staging", v)
	}

	// The running job's CI_JOB_TOKEN starts a pipeline of its project, source pipeline...
	resp, b = jobapitest.Send(t, inst.URL, "POST", run, map[string]any{"token": job.Token, "ref": "main"})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if p := decode[api.Pipeline](t, b); p.Source != "pipeline" || strings.Join(jobNames(p), ",") != "always" {
		t.Errorf("job token's pipeline: source %q jobs %s, want pipeline and always only", p.Source, strings.Join(jobNames(p), ","))
	}
	// ...but not of another project, and not once the job has ended.
	resp, b = jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/trigger/pipeline", other.ID), map[string]any{"token": job.Token, "ref": "main"})
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	r.Finish(t, job, "success", "")
	resp, b = jobapitest.Send(t, inst.URL, "POST", run, map[string]any{"token": job.Token, "ref": "main"})
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)

	for _, c := range []struct {
		what string
		body map[string]any
		want int
		says string
	}{
		{"another project's trigger token", map[string]any{"token": otherTrigger.Token, "ref": "main"}, http.StatusNotFound, "404"},
		{"an unknown token", map[string]any{"token": "glptt-" + strings.Repeat("x", 32), "ref": "main"}, http.StatusNotFound, "404"},
		{"no token", map[string]any{"ref": "main"}, http.StatusBadRequest, "token"},
		{"no ref", map[string]any{"token": token}, http.StatusBadRequest, "ref"},
		{"an unknown ref", map[string]any{"token": token, "ref": "nope"}, http.StatusBadRequest, "nope"},
		{"a bad variable name", map[string]any{"token": token, "ref": "main", "variables": map[string]string{"A-B": "x"}}, http.StatusBadRequest, "A-B"},
		{"spec:inputs", map[string]any{"token": token, "ref": "main", "inputs": map[string]string{"a": "b"}}, http.StatusBadRequest, "inputs"},
	} {
		resp, b := jobapitest.Send(t, inst.URL, "POST", run, c.body)
		if msg := jobapitest.WantJSONError(t, resp, b, c.want); !strings.Contains(msg, c.says) {
			t.Errorf("%s: %q, want it to say %q", c.what, msg, c.says)
		}
	}
	resp, b = inst.Do(t, "POST", triggers, map[string]any{})
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "description") {
		t.Errorf("create without description: %q", msg)
	}
	resp, b = inst.Do(t, "POST", "/api/v4/projects/999999/triggers", map[string]any{"description": "x"})
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	resp, b = jobapitest.Send(t, inst.URL, "GET", triggers, nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusUnauthorized)

	inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("%s/%d", triggers, created.ID), nil, nil)
	resp, b = jobapitest.Send(t, inst.URL, "POST", run, map[string]any{"token": token, "ref": "main"})
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	inst.MustDo(t, http.StatusNotFound, "GET", fmt.Sprintf("%s/%d", triggers, created.ID), nil, nil)

	// Creating, renaming and deleting a token are in the audit log, by the admin token, on
	// its project; the refused create is not, and no token is, not even its last four.
	resp, b = inst.Do(t, "GET", "/api/v4/admin/events?per_page=100", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if bytes.Contains(b, []byte(token)) || bytes.Contains(b, []byte(otherTrigger.Token)) {
		t.Errorf("the audit log holds a trigger token: %s", b)
	}
	got2 := map[string]int{}
	for _, e := range decode[[]api.AuditEvent](t, b) {
		if !strings.HasPrefix(e.Action, "trigger_") {
			continue
		}
		got2[e.Action+" "+e.Target]++
		if !strings.HasPrefix(e.Actor, "admin (request ") {
			t.Errorf("audit %s: actor %q, want the admin token", e.Action, e.Actor)
		}
		if _, ok := e.Detail["token"]; ok {
			t.Errorf("audit %s keeps a token: %+v", e.Action, e.Detail)
		}
	}
	mine, theirs := fmt.Sprintf("project:%d", project.ID), fmt.Sprintf("project:%d", other.ID)
	want := map[string]int{"trigger_created " + mine: 1, "trigger_updated " + mine: 1, "trigger_deleted " + mine: 1, "trigger_created " + theirs: 1}
	if diff := cmp.Diff(want, got2); diff != "" {
		t.Errorf("trigger audit events (-want +got):\n%s", diff)
	}
}
