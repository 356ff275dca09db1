package projecttest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// lockedBuffer collects a replica's log; the server writes from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The credentials of a remote: neither part may appear anywhere but the job payload.
const (
	remoteUser     = "deploy-bot-user"
	remotePassword = "s3cret-remote-password"
)

// TestProjectsCRUD: create, show, list (paged), change and delete projects; a remote's
// credentials never appear in an answer, the audit log or the server log.
func TestProjectsCRUD(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Log: logs})
	secretURL := fmt.Sprintf("https://%s:%s@git.example.com/grp/app.git", remoteUser, remotePassword)
	var bodies [][]byte
	keep := func(b []byte) []byte { bodies = append(bodies, b); return b }

	resp, b := inst.Do(t, "POST", "/api/v4/projects", map[string]any{"name": "My App", "repo_url": secretURL})
	jobapitest.WantStatus(t, resp, keep(b), http.StatusCreated)
	app := jobapitest.Decode[api.Project](t, b)
	want := api.Project{ID: app.ID, Name: "My App", Path: "my-app", PathWithNamespace: "jobapi/my-app",
		RepoURL: "https://*****:*****@git.example.com/grp/app.git", DefaultBranch: "main"}
	if app.ID == 0 || app.Name != want.Name || app.Path != want.Path || app.PathWithNamespace != want.PathWithNamespace ||
		app.RepoURL != want.RepoURL || app.DefaultBranch != want.DefaultBranch {
		t.Fatalf("created %+v, want %+v", app, want)
	}

	// A form body, a token as the username, an ssh remote, a file remote.
	resp, b = inst.Do(t, "POST", "/api/v4/projects", url.Values{"name": {"tok"}, "path": {"tok"},
		"repo_url": {"https://" + remotePassword + "@git.example.com/tok.git"}, "default_branch": {"trunk"}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, keep(b), http.StatusCreated)
	if p := jobapitest.Decode[api.Project](t, b); p.RepoURL != "https://*****@git.example.com/tok.git" || p.DefaultBranch != "trunk" {
		t.Errorf("form-created project = %+v, want the token redacted and branch trunk", p)
	}
	for i, remote := range []string{"ssh://git@git.example.com:2222/grp/x.git", "git@git.example.com:grp/y.git", "file:///srv/git/z.git", ""} {
		resp, b = inst.Do(t, "POST", "/api/v4/projects", map[string]any{"name": fmt.Sprintf("remote %d", i), "repo_url": remote})
		jobapitest.WantStatus(t, resp, keep(b), http.StatusCreated)
		if p := jobapitest.Decode[api.Project](t, b); p.RepoURL != remote {
			t.Errorf("remote %q answered as %q, want it unchanged (no credentials in it)", remote, p.RepoURL)
		}
	}

	resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d", app.ID), nil)
	jobapitest.WantStatus(t, resp, keep(b), http.StatusOK)
	if got := jobapitest.Decode[api.Project](t, b); got.RepoURL != want.RepoURL {
		t.Errorf("shown repo_url %q, want %q", got.RepoURL, want.RepoURL)
	}

	// Six projects, pages of four.
	resp, b = inst.Do(t, "GET", "/api/v4/projects?per_page=4", nil)
	jobapitest.WantStatus(t, resp, keep(b), http.StatusOK)
	if page := jobapitest.Decode[[]api.Project](t, b); len(page) != 4 || page[0].ID != app.ID {
		t.Errorf("page 1 = %d projects starting %d, want 4 starting %d", len(page), page[0].ID, app.ID)
	}
	for k, v := range map[string]string{"X-Page": "1", "X-Per-Page": "4", "X-Total": "6", "X-Next-Page": "2"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("page 1 %s = %q, want %q", k, got, v)
		}
	}
	resp, b = inst.Do(t, "GET", "/api/v4/projects?per_page=4&page=2", nil)
	jobapitest.WantStatus(t, resp, keep(b), http.StatusOK)
	if page := jobapitest.Decode[[]api.Project](t, b); len(page) != 2 || resp.Header.Get("X-Next-Page") != "" {
		t.Errorf("page 2 = %d projects, X-Next-Page %q; want 2 and none", len(page), resp.Header.Get("X-Next-Page"))
	}

	// Only what is sent changes; a new remote is redacted too.
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/projects/%d", app.ID), map[string]any{"default_branch": "develop"})
	jobapitest.WantStatus(t, resp, keep(b), http.StatusOK)
	if got := jobapitest.Decode[api.Project](t, b); got.DefaultBranch != "develop" || got.Name != "My App" || got.RepoURL != want.RepoURL {
		t.Errorf("after PUT default_branch: %+v", got)
	}
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/projects/%d", app.ID),
		map[string]any{"repo_url": "http://" + remoteUser + ":" + remotePassword + "@10.0.0.1/app.git"})
	jobapitest.WantStatus(t, resp, keep(b), http.StatusOK)
	if got := jobapitest.Decode[api.Project](t, b); got.RepoURL != "http://*****:*****@10.0.0.1/app.git" {
		t.Errorf("after PUT repo_url: %q", got.RepoURL)
	}

	// A project with an unfinished pipeline cannot go; once it is finished, it can.
	p := inst.CreatePipeline(t, app.ID, []string{"test"}, jobapitest.Job{"name": "unit", "script": "true"})
	resp, b = inst.Do(t, "DELETE", fmt.Sprintf("/api/v4/projects/%d", app.ID), nil)
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusConflict); !strings.Contains(msg, "unfinished pipelines") {
		t.Errorf("409 message %q does not say why", msg)
	}
	inst.MustDo(t, http.StatusOK, "POST", jobapitest.PipelinePath(p.ProjectID, p.ID)+"/cancel", nil, nil)
	resp, b = inst.Do(t, "DELETE", fmt.Sprintf("/api/v4/projects/%d", app.ID), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusNoContent)
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		resp, b = inst.Do(t, m, fmt.Sprintf("/api/v4/projects/%d", app.ID), map[string]any{"name": "x"})
		jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	}
	// Its pipeline stays readable, as an implicit project's.
	inst.MustDo(t, http.StatusOK, "GET", jobapitest.PipelinePath(p.ProjectID, p.ID), nil, nil)

	// The audit log names every change, without the credentials.
	resp, b = inst.Do(t, "GET", "/api/v4/admin/events?per_page=100", nil)
	jobapitest.WantStatus(t, resp, keep(b), http.StatusOK)
	actions := map[string]int{}
	for _, e := range jobapitest.Decode[[]api.AuditEvent](t, b) {
		actions[e.Action]++
	}
	if actions["project_created"] != 6 || actions["project_updated"] != 2 || actions["project_deleted"] != 1 {
		t.Errorf("audit actions = %v, want 6 created, 2 updated, 1 deleted", actions)
	}

	for i, body := range bodies {
		for _, secret := range []string{remoteUser, remotePassword} {
			if bytes.Contains(body, []byte(secret)) {
				t.Errorf("answer %d shows %q: %.300s", i, secret, body)
			}
		}
	}
	for _, secret := range []string{remoteUser, remotePassword} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the server log shows %q", secret)
		}
	}
	if rows := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM projects WHERE repo_url LIKE '%' || $1 || '%'`, remotePassword); rows != 1 {
		t.Errorf("%d stored remotes hold the credentials, want 1 (the token one): the runner needs them", rows)
	}
}

// TestProjectsBadInput: every malformed project or variable is a 400 naming the problem,
// and nothing is written.
func TestProjectsBadInput(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "taken"}, &p)
	bad := []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"no name", "POST", "/api/v4/projects", map[string]any{"path": "x"}, "name is required"},
		{"blank name", "POST", "/api/v4/projects", map[string]any{"name": "  "}, "name is required"},
		{"path taken", "POST", "/api/v4/projects", map[string]any{"name": "Taken"}, "already exists"},
		{"bad path", "POST", "/api/v4/projects", map[string]any{"name": "x", "path": "a/b"}, "path"},
		{"path .git", "POST", "/api/v4/projects", map[string]any{"name": "x", "path": "x.git"}, "path"},
		{"ftp remote", "POST", "/api/v4/projects", map[string]any{"name": "x", "repo_url": "ftp://h/r.git"}, "scheme"},
		{"no host", "POST", "/api/v4/projects", map[string]any{"name": "x", "repo_url": "https:///r.git"}, "host"},
		{"relative", "POST", "/api/v4/projects", map[string]any{"name": "x", "repo_url": "../r.git"}, "repo_url"},
		{"space in remote", "POST", "/api/v4/projects", map[string]any{"name": "x", "repo_url": "https://h/a b.git"}, "repo_url"},
		{"bad branch", "POST", "/api/v4/projects", map[string]any{"name": "x", "default_branch": "a..b"}, "default_branch"},
		{"branch with colon", "POST", "/api/v4/projects", map[string]any{"name": "x", "default_branch": "a:b"}, "default_branch"},
		{"unknown field", "POST", "/api/v4/projects", map[string]any{"name": "x", "repo_ulr": "https://h/r"}, "unknown field"},
		{"wrong type", "POST", "/api/v4/projects", map[string]any{"name": 5}, "name"},
		{"bad id", "GET", "/api/v4/projects/abc", nil, "project_id"},
		{"key missing", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"value": "v"}, "key is required"},
		{"bad key", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A-B", "value": "v"}, "key"},
		{"value missing", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A"}, "value is required"},
		{"short masked", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "1234567", "masked": true}, "cannot be masked"},
		{"multi-line masked", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "12345678\n9", "masked": true}, "cannot be masked"},
		{"bad type", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "v", "variable_type": "secret"}, "variable_type"},
		{"bad masked", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "v", "masked": "perhaps"}, "true or false"},
		{"environment", "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "v", "environment_scope": "prod"}, "environment_scope"},
	}
	before := jobapitest.QueryInt(t, inst.Pool, `SELECT (SELECT count(*) FROM projects) * 1000 + (SELECT count(*) FROM project_variables)`)
	for _, tc := range bad {
		resp, b := inst.Do(t, tc.method, tc.path, tc.body)
		msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%s: message %q does not mention %q", tc.name, msg, tc.want)
		}
	}
	if after := jobapitest.QueryInt(t, inst.Pool, `SELECT (SELECT count(*) FROM projects) * 1000 + (SELECT count(*) FROM project_variables)`); after != before {
		t.Errorf("rejected requests wrote rows: %d → %d", before, after)
	}
	// A taken key, then a key change through PUT.
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "1"}, nil)
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), map[string]any{"key": "A", "value": "2"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/projects/%d/variables/A", p.ID), map[string]any{"key": "B"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	// Masking an existing short value is refused as on create.
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/projects/%d/variables/A", p.ID), map[string]any{"masked": true})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	// Unknown project or key: 404.
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v4/projects/99999/variables"}, {"POST", "/api/v4/projects/99999/variables"},
		{"GET", fmt.Sprintf("/api/v4/projects/%d/variables/NOPE", p.ID)}, {"PUT", fmt.Sprintf("/api/v4/projects/%d/variables/NOPE", p.ID)},
		{"DELETE", fmt.Sprintf("/api/v4/projects/%d/variables/NOPE", p.ID)},
	} {
		resp, b := inst.Do(t, c.method, c.path, map[string]any{"key": "NOPE", "value": "v"})
		jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	}
	// Without the admin token, nothing.
	resp, b = jobapitest.Send(t, inst.URL, "GET", "/api/v4/projects", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusUnauthorized)
}

// TestProjectVariablesCRUD: GitLab's variable API shapes, paging, and changes.
func TestProjectVariablesCRUD(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "vars"}, &p)
	base := fmt.Sprintf("/api/v4/projects/%d/variables", p.ID)
	var v api.ProjectVariable
	inst.MustDo(t, http.StatusCreated, "POST", base, map[string]any{"key": "DEPLOY_TOKEN", "value": "tok-12345678",
		"masked": true, "protected": "true"}, &v)
	if v != (api.ProjectVariable{Key: "DEPLOY_TOKEN", Value: "tok-12345678", Masked: true, Protected: true,
		VariableType: "env_var", EnvironmentScope: "*"}) {
		t.Errorf("created %+v", v)
	}
	resp, b := inst.Do(t, "POST", base, url.Values{"key": {"KUBECONFIG"}, "value": {"apiVersion: v1\nkind: Config\n"},
		"variable_type": {"file"}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	inst.MustDo(t, http.StatusCreated, "POST", base, map[string]any{"key": "A_FIRST", "value": ""}, nil)

	resp, b = inst.Do(t, "GET", base+"?per_page=2", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	page := jobapitest.Decode[[]api.ProjectVariable](t, b)
	if len(page) != 2 || page[0].Key != "A_FIRST" || page[1].Key != "DEPLOY_TOKEN" ||
		resp.Header.Get("X-Total") != "3" || resp.Header.Get("X-Next-Page") != "2" {
		t.Errorf("page 1 = %+v (X-Total %q, X-Next-Page %q), want A_FIRST, DEPLOY_TOKEN of 3",
			page, resp.Header.Get("X-Total"), resp.Header.Get("X-Next-Page"))
	}
	inst.MustDo(t, http.StatusOK, "GET", base+"/KUBECONFIG", nil, &v)
	if v.VariableType != "file" || v.Value != "apiVersion: v1\nkind: Config\n" {
		t.Errorf("KUBECONFIG = %+v", v)
	}
	inst.MustDo(t, http.StatusOK, "PUT", base+"/DEPLOY_TOKEN", map[string]any{"value": "tok-87654321", "protected": false}, &v)
	if v.Value != "tok-87654321" || !v.Masked || v.Protected {
		t.Errorf("after PUT = %+v, want the new value, still masked, no longer protected", v)
	}
	inst.MustDo(t, http.StatusNoContent, "DELETE", base+"/A_FIRST", nil, nil)
	resp, _ = inst.Do(t, "GET", base, nil)
	if resp.Header.Get("X-Total") != "2" {
		t.Errorf("after DELETE X-Total = %q, want 2", resp.Header.Get("X-Total"))
	}
	// Deleting the project takes its variables.
	inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/projects/%d", p.ID), nil, nil)
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM project_variables`); n != 0 {
		t.Errorf("%d variables outlived their project", n)
	}
}

// TestJobPayloadProjects: what a job of a project with an https remote, a file remote, or
// none gets in git_info and its variables, with JOBAPI_EXTERNAL_URL as the base of URLs.
func TestJobPayloadProjects(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.ExternalURL = "https://ci.example.com" }})
	_, token := inst.RegisterRunner(t, "test runner", []string{"linux", "docker"}, true)
	const sha = "0123456789abcdef0123456789abcdef01234567"

	project := func(body map[string]any) api.Project {
		var p api.Project
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", body, &p)
		return p
	}
	https := project(map[string]any{"name": "web", "repo_url": "https://git.example.com/grp/web.git"})
	withCreds := project(map[string]any{"name": "creds", "repo_url": fmt.Sprintf("https://%s:%s@git.example.com/c.git", remoteUser, remotePassword)})
	file := project(map[string]any{"name": "local", "repo_url": "file:///srv/git/local.git", "default_branch": "trunk"})
	none := project(map[string]any{"name": "scripts"})
	addVar := func(p api.Project, body map[string]any) {
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID), body, nil)
	}
	addVar(https, map[string]any{"key": "DEPLOY_TOKEN", "value": "project-secret-1234", "masked": true})
	addVar(https, map[string]any{"key": "LEVEL", "value": "project"})
	addVar(https, map[string]any{"key": "ONLY_MAIN", "value": "yes", "protected": true})
	addVar(https, map[string]any{"key": "CI_JOB_NAME", "value": "project overrides predefined"})
	addVar(https, map[string]any{"key": "CONFIG_FILE", "value": "a: 1", "variable_type": "file"})

	run := func(projectID int64, ref string, jobVars map[string]any) (api.Job, api.Pipeline) {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", projectID), map[string]any{
			"ref": ref, "sha": sha, "stages": []string{"test"},
			"jobs": []map[string]any{{"name": "unit", "stage": "test", "script": "make test", "variables": jobVars}}}, &p)
		job := jobapitest.TakeJob(t, inst.URL, token)
		jobapitest.FinishJob(t, inst.URL, job, "success", "", 0)
		return job, p
	}

	t.Run("https remote", func(t *testing.T) {
		job, p := run(https.ID, "main", map[string]any{"LEVEL": "job", "GIT_DEPTH": "3"})
		if p.GitStrategy != "fetch" {
			t.Errorf("pipeline git_strategy %q, want fetch", p.GitStrategy)
		}
		// git.example.com is not jobapi's host: the job token stays off it.
		want := api.GitInfo{RepoURL: "https://git.example.com/grp/web.git",
			RepoObjectFormat: "sha1", Ref: "main", Sha: sha, BeforeSha: strings.Repeat("0", 40), RefType: "branch",
			Refspecs: []string{"+refs/heads/main:refs/remotes/origin/main"}, Depth: 3, Protected: true}
		if fmt.Sprint(job.GitInfo) != fmt.Sprint(want) {
			t.Errorf("git_info\n got  %+v\n want %+v", job.GitInfo, want)
		}
		if !job.AllowGitFetch {
			t.Errorf("allow_git_fetch false for a project with a remote")
		}
		vars := jobapitest.JobVariables(job)
		wantVars := map[string]string{
			"CI": "true", "GITLAB_CI": "true", "CI_SERVER_URL": "https://ci.example.com", "CI_SERVER_HOST": "ci.example.com",
			"CI_API_V4_URL": "https://ci.example.com/api/v4",
			"CI_PROJECT_ID": fmt.Sprint(https.ID), "CI_PROJECT_NAME": "web", "CI_PROJECT_PATH": "jobapi/web",
			"CI_PROJECT_URL": "https://ci.example.com/jobapi/web", "CI_DEFAULT_BRANCH": "main",
			"CI_PIPELINE_ID": fmt.Sprint(p.ID), "CI_PIPELINE_IID": fmt.Sprint(p.IID), "CI_PIPELINE_SOURCE": "api",
			"CI_PIPELINE_URL": fmt.Sprintf("https://ci.example.com/jobapi/web/-/pipelines/%d", p.ID),
			"CI_JOB_ID":       fmt.Sprint(job.ID), "CI_JOB_STAGE": "test",
			"CI_JOB_URL":   fmt.Sprintf("https://ci.example.com/jobapi/web/-/jobs/%d", job.ID),
			"CI_JOB_TOKEN": job.Token, "CI_JOB_TIMEOUT": "3600",
			"CI_COMMIT_SHA": sha, "CI_COMMIT_SHORT_SHA": sha[:8], "CI_COMMIT_REF_NAME": "main", "CI_COMMIT_REF_SLUG": "main",
			"CI_COMMIT_BRANCH": "main", "CI_COMMIT_BEFORE_SHA": strings.Repeat("0", 40),
			"CI_RUNNER_DESCRIPTION": "test runner", "CI_RUNNER_TAGS": `["linux","docker"]`,
			// GitLab's precedence: predefined < job (YAML) < project.
			"CI_JOB_NAME": "project overrides predefined", "LEVEL": "project", "DEPLOY_TOKEN": "project-secret-1234",
			"ONLY_MAIN": "yes", "GIT_DEPTH": "3",
		}
		for k, w := range wantVars {
			if got, ok := vars[k]; !ok || got.Value != w {
				t.Errorf("%s = %q (set %v), want %q", k, got.Value, ok, w)
			}
		}
		for _, k := range []string{"CI_COMMIT_TAG", "GIT_STRATEGY"} {
			if _, ok := vars[k]; ok {
				t.Errorf("%s is set for a branch pipeline with a remote", k)
			}
		}
		if v := vars["CI_JOB_TOKEN"]; !v.Masked || v.Public {
			t.Errorf("CI_JOB_TOKEN %+v, want masked and not public", v)
		}
		if v := vars["DEPLOY_TOKEN"]; !v.Masked || v.Public {
			t.Errorf("DEPLOY_TOKEN %+v, want masked and not public", v)
		}
		if v := vars["CONFIG_FILE"]; !v.File {
			t.Errorf("CONFIG_FILE %+v, want a file variable", v)
		}
		if vars["CI_JOB_STARTED_AT"].Value == "" || vars["CI_RUNNER_ID"].Value == "0" {
			t.Errorf("CI_JOB_STARTED_AT %q, CI_RUNNER_ID %q", vars["CI_JOB_STARTED_AT"].Value, vars["CI_RUNNER_ID"].Value)
		}
		seen := map[string]bool{}
		for _, v := range job.Variables {
			if seen[v.Key] {
				t.Errorf("variable %s is sent twice", v.Key)
			}
			seen[v.Key] = true
		}
	})

	t.Run("https remote, tag, protected variable withheld", func(t *testing.T) {
		job, _ := run(https.ID, "refs/tags/v1.2.0", nil)
		if g := job.GitInfo; g.Ref != "v1.2.0" || g.RefType != "tag" || g.Protected || g.Depth != 20 ||
			fmt.Sprint(g.Refspecs) != "[+refs/tags/v1.2.0:refs/tags/v1.2.0]" {
			t.Errorf("git_info %+v", g)
		}
		vars := jobapitest.JobVariables(job)
		if vars["CI_COMMIT_TAG"].Value != "v1.2.0" || vars["CI_COMMIT_REF_NAME"].Value != "v1.2.0" {
			t.Errorf("CI_COMMIT_TAG %q, CI_COMMIT_REF_NAME %q", vars["CI_COMMIT_TAG"].Value, vars["CI_COMMIT_REF_NAME"].Value)
		}
		for _, k := range []string{"CI_COMMIT_BRANCH", "ONLY_MAIN"} {
			if _, ok := vars[k]; ok {
				t.Errorf("%s is set on a tag pipeline", k)
			}
		}
	})

	t.Run("https remote with credentials", func(t *testing.T) {
		job, _ := run(withCreds.ID, "main", nil)
		if want := fmt.Sprintf("https://%s:%s@git.example.com/c.git", remoteUser, remotePassword); job.GitInfo.RepoURL != want {
			t.Errorf("repo_url %q, want the operator's credentials as given", job.GitInfo.RepoURL)
		}
	})

	t.Run("file remote", func(t *testing.T) {
		job, _ := run(file.ID, "feature/x", nil)
		if g := job.GitInfo; g.RepoURL != "file:///srv/git/local.git" || g.Ref != "feature/x" || g.Protected ||
			fmt.Sprint(g.Refspecs) != "[+refs/heads/feature/x:refs/remotes/origin/feature/x]" {
			t.Errorf("git_info %+v", g)
		}
		vars := jobapitest.JobVariables(job)
		if vars["CI_DEFAULT_BRANCH"].Value != "trunk" || vars["CI_COMMIT_REF_SLUG"].Value != "feature-x" {
			t.Errorf("CI_DEFAULT_BRANCH %q, CI_COMMIT_REF_SLUG %q", vars["CI_DEFAULT_BRANCH"].Value, vars["CI_COMMIT_REF_SLUG"].Value)
		}
	})

	t.Run("no repository", func(t *testing.T) {
		job, p := run(none.ID, "main", nil)
		if p.GitStrategy != "none" {
			t.Errorf("pipeline git_strategy %q, want none", p.GitStrategy)
		}
		if got := inst.Pipeline(t, p).GitStrategy; got != "none" {
			t.Errorf("GET pipeline git_strategy %q, want none", got)
		}
		if v := jobapitest.JobVariables(job)["GIT_STRATEGY"]; v.Value != "none" {
			t.Errorf("GIT_STRATEGY %+v, want none", v)
		}
		if want := "https://gitlab-ci-token:" + job.Token + "@ci.example.com/jobapi/scripts.git"; job.GitInfo.RepoURL != want {
			t.Errorf("repo_url %q, want %q", job.GitInfo.RepoURL, want)
		}
		// The job may still choose its strategy.
		job, _ = run(none.ID, "main", map[string]any{"GIT_STRATEGY": "empty"})
		if v := jobapitest.JobVariables(job)["GIT_STRATEGY"]; v.Value != "empty" {
			t.Errorf("GIT_STRATEGY %+v, want the job's empty", v)
		}
	})

	// The job token goes only to jobapi's own host (JOBAPI_EXTERNAL_URL's), as GitLab adds
	// it only for its own repositories; never in clear to another host.
	t.Run("job token only for jobapi's host", func(t *testing.T) {
		for remote, want := range map[string]string{
			"https://ci.example.com/jobapi/own.git":     "https://gitlab-ci-token:%s@ci.example.com/jobapi/own.git",
			"https://CI.example.com:443/jobapi/own.git": "https://gitlab-ci-token:%s@CI.example.com:443/jobapi/own.git",
			"https://ci.example.com:8443/own.git":       "https://ci.example.com:8443/own.git",
			"https://ci.example.com.evil.test/own.git":  "https://ci.example.com.evil.test/own.git",
			"http://other.example.com/own.git":          "http://other.example.com/own.git",
			"https://github.com/grp/app.git":            "https://github.com/grp/app.git",
		} {
			p := project(map[string]any{"name": "tok-" + fmt.Sprint(len(remote)) + strings.NewReplacer(":", "", "/", "", ".", "").Replace(remote)[:8],
				"repo_url": remote})
			job, _ := run(p.ID, "main", nil)
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, job.Token)
			}
			if job.GitInfo.RepoURL != want {
				t.Errorf("%s: repo_url %q, want %q", remote, job.GitInfo.RepoURL, want)
			}
		}
	})

	t.Run("implicit project", func(t *testing.T) {
		job, p := run(424242, "main", nil)
		vars := jobapitest.JobVariables(job)
		if p.GitStrategy != "none" || vars["GIT_STRATEGY"].Value != "none" || vars["CI_PROJECT_NAME"].Value != "project-424242" ||
			vars["CI_PROJECT_PATH"].Value != "jobapi/project-424242" || job.JobInfo.ProjectName != "project-424242" {
			t.Errorf("implicit project: git_strategy %q, GIT_STRATEGY %q, CI_PROJECT_NAME %q, CI_PROJECT_PATH %q",
				p.GitStrategy, vars["GIT_STRATEGY"].Value, vars["CI_PROJECT_NAME"].Value, vars["CI_PROJECT_PATH"].Value)
		}
	})
}

// TestProjectMaskedVariableInTrace: a masked project variable is masked in the stored log,
// as a job's own masked variables are.
func TestProjectMaskedVariableInTrace(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "masked"}, &p)
	const secret = "project-masked-value-42"
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", p.ID),
		map[string]any{"key": "SECRET", "value": secret, "masked": true}, nil)
	inst.CreatePipeline(t, p.ID, []string{"test"}, jobapitest.Job{"name": "leak", "script": "echo $SECRET"})
	job := jobapitest.TakeJob(t, inst.URL, token)
	resp, b := jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "running"})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	line := []byte("the secret is " + secret + "\n")
	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, line)
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	// Another replica has not seen the assignment: it reads the build and its project.
	replica := inst.Replica(t, jobapitest.Options{})
	resp, b = jobapitest.PatchTrace(t, replica.URL, job.ID, job.Token, len(line), line)
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", p.ID, job.ID), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if want := strings.Repeat("the secret is "+strings.Repeat("x", len(secret))+"\n", 2); string(b) != want {
		t.Errorf("trace = %q, want %q", b, want)
	}
}
