package hooktest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// allowLocal lets hooks reach the tests' receivers on 127.0.0.1.
func allowLocal(cfg *server.Config) { cfg.HooksAllowLocalNetwork = true }

var projectNames atomic.Int64

func newProject(t *testing.T, inst *jobapitest.Instance) int64 {
	t.Helper()
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": fmt.Sprintf("app%d", projectNames.Add(1))}, &p)
	return p.ID
}

func hooksPath(projectID int64) string { return fmt.Sprintf("/api/v4/projects/%d/hooks", projectID) }

// TestHooksAPI creates, reads, changes and deletes a hook in GitLab's shapes: the token is
// written and never read back, GitLab's defaults apply, and bad input is a 400 that writes
// nothing.
func TestHooksAPI(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: allowLocal})
	pid := newProject(t, inst)
	const token = "hook-secret-token-never-shown"
	var created api.ProjectHook
	inst.MustDo(t, http.StatusCreated, "POST", hooksPath(pid), map[string]any{"url": "http://127.0.0.1:9/hook",
		"token": token, "pipeline_events": true, "issues_events": false}, &created)
	if !created.PushEvents || !created.PipelineEvents || created.JobEvents || !created.EnableSSLVerification ||
		!created.TokenPresent || created.BranchFilterStrategy != "wildcard" || created.ProjectID != pid {
		t.Fatalf("created %+v: want GitLab's defaults (push events, SSL verified, wildcard) and pipeline events", created)
	}
	one := fmt.Sprintf("%s/%d", hooksPath(pid), created.ID)
	// Form bodies as well as JSON, as GitLab takes them.
	resp, body := inst.Do(t, "PUT", one, "job_events=true&push_events=false&push_events_branch_filter=main",
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	var got api.ProjectHook
	inst.MustDo(t, http.StatusOK, "GET", one, nil, &got)
	if !got.JobEvents || got.PushEvents || got.PushEventsBranchFilter != "main" || !got.TokenPresent || !got.PipelineEvents {
		t.Fatalf("after the form PUT %+v: want job events on, push events off, the filter, the token kept", got)
	}
	for _, path := range []string{hooksPath(pid), one} {
		_, raw := inst.Do(t, "GET", path, nil)
		if strings.Contains(string(raw), token) || strings.Contains(string(raw), `"token"`) {
			t.Fatalf("GET %s shows the token: %s", path, raw)
		}
	}

	for _, bad := range []struct {
		body any
		want string
	}{
		{map[string]any{}, "url is missing"},
		{map[string]any{"url": "ftp://example.com/x"}, "url is invalid"},
		{map[string]any{"url": "https://user:pw@example.com/x"}, "credentials"},
		{map[string]any{"url": "https://example.com/x", "issues_events": true}, "issues_events"},
		{map[string]any{"url": "https://example.com/x", "branch_filter_strategy": "glob"}, "branch_filter_strategy"},
		{map[string]any{"url": "https://example.com/x", "branch_filter_strategy": "regex", "push_events_branch_filter": "("}, "regular expression"},
		{map[string]any{"url": "https://example.com/x", "bogus": 1}, "bogus"},
	} {
		resp, body := inst.Do(t, "POST", hooksPath(pid), bad.body)
		if msg := jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest); !strings.Contains(msg, bad.want) {
			t.Errorf("POST %v: message %q, want it to name %q", bad.body, msg, bad.want)
		}
	}
	var list []api.ProjectHook
	inst.MustDo(t, http.StatusOK, "GET", hooksPath(pid), nil, &list)
	if len(list) != 1 {
		t.Fatalf("hooks after bad requests: %+v, want the one created", list)
	}
	inst.MustDo(t, http.StatusNotFound, "GET", hooksPath(999999), nil, nil)
	inst.MustDo(t, http.StatusNotFound, "POST", hooksPath(999999), map[string]any{"url": "https://example.com/x"}, nil)
	inst.MustDo(t, http.StatusNoContent, "DELETE", one, nil, nil)
	inst.MustDo(t, http.StatusNotFound, "GET", one, nil, nil)
	inst.MustDo(t, http.StatusNotFound, "GET", one+"/events", nil, nil)
	inst.MustDo(t, http.StatusNotFound, "DELETE", one, nil, nil)
	// The inbound route of forges' webhooks is still there beside the hooks.
	resp, body = inst.Do(t, "POST", fmt.Sprintf("%s/inbound/github", hooksPath(pid)), map[string]any{})
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		t.Fatalf("inbound webhook route: %d %s", resp.StatusCode, body)
	}
}

// TestHooksRefuseLocalNetwork: without JOBAPI_HOOKS_ALLOW_LOCAL_NETWORK a hook URL on the
// local network is refused when it is set.
func TestHooksRefuseLocalNetwork(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	pid := newProject(t, inst)
	for _, u := range []string{"http://127.0.0.1:8080/x", "http://localhost/x", "http://10.1.2.3/x", "http://[::1]/x",
		"http://169.254.169.254/latest/meta-data", "http://192.168.0.1/", "http://[::ffff:127.0.0.1]/x"} {
		resp, body := inst.Do(t, "POST", hooksPath(pid), map[string]any{"url": u})
		if msg := jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest); !strings.Contains(msg, "local network") {
			t.Errorf("POST url %s: message %q, want it refused as the local network", u, msg)
		}
	}
	inst.MustDo(t, http.StatusCreated, "POST", hooksPath(pid), map[string]any{"url": "https://hooks.example.com/x"}, nil)
}

// TestPythonGitlabHooks runs python-gitlab (Debian's python3-gitlab) on a project's hooks:
// list, create, get, save, delete (testdata/hooks.py).
func TestPythonGitlabHooks(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	inst := jobapitest.Start(t, jobapitest.Options{Configure: allowLocal})
	pid := newProject(t, inst)
	recv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(recv.Close)
	out, err := exec.Command(python, "testdata/hooks.py", inst.URL, jobapitest.AdminToken, fmt.Sprint(pid), recv.URL+"/hook").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}
