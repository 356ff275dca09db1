package webtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// The pipeline page shows a trigger job with a link to its child pipeline, and the child's
// page links back to its parent and the trigger job; the live refresh keeps the link.
func TestPipelinePageLinksParentAndChild(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	bare, work := filepath.Join(root, "repo.git"), filepath.Join(root, "work")
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=jobapi",
		"GIT_AUTHOR_EMAIL=jobapi@example.com", "GIT_COMMITTER_NAME=jobapi", "GIT_COMMITTER_EMAIL=jobapi@example.com")
	git := func(dir string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(root, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	git(root, "init", "--quiet", "--initial-branch=main", work)
	if err := os.WriteFile(filepath.Join(work, "child.yml"), []byte("child-job:\n  script: echo child\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(work, "add", ".")
	git(work, "commit", "--quiet", "-m", "child")
	sha := git(work, "rev-parse", "HEAD")
	git(work, "push", "--quiet", bare, "main")

	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "web", "repo_url": "file://" + bare}, &project)
	resp, body := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=main&sha=%s", project.ID, sha),
		"fan-out:\n  trigger: {include: child.yml, strategy: depend}\n", "Content-Type", "application/yaml")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var parent api.Pipeline
	if err := json.Unmarshal(body, &parent); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	page := b.get(fmt.Sprintf("/projects/%d/pipelines/%d", project.ID, parent.ID), http.StatusOK)
	if !strings.Contains(page, `data-name="fan-out"`) || !strings.Contains(page, "· trigger") {
		t.Error("the pending trigger job is not shown as one")
	}
	if _, err := inst.Server.Bridges.CreateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var bridges []api.Bridge
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/bridges", project.ID, parent.ID), nil, &bridges)
	if len(bridges) != 1 || bridges[0].DownstreamPipeline == nil {
		t.Fatalf("bridges %+v", bridges)
	}
	child := bridges[0].DownstreamPipeline.ID
	link := fmt.Sprintf(`href="/projects/%d/pipelines/%d" class="child-link"`, project.ID, child)
	for _, path := range []string{"", "?fragment=1"} {
		if page := b.get(fmt.Sprintf("/projects/%d/pipelines/%d%s", project.ID, parent.ID, path), http.StatusOK); !strings.Contains(page, link) {
			t.Errorf("parent page%s lacks the link to child #%d", path, child)
		}
	}
	page = b.get(fmt.Sprintf("/projects/%d/pipelines/%d", project.ID, child), http.StatusOK)
	back := fmt.Sprintf(`href="/projects/%d/pipelines/%d" id="parent-pipeline"`, project.ID, parent.ID)
	if !strings.Contains(page, back) || !strings.Contains(page, fmt.Sprintf(`href="/projects/%d/jobs/%d"`, project.ID, bridges[0].ID)) ||
		!strings.Contains(page, "parent_pipeline") {
		t.Errorf("child page lacks its parent and trigger job:\n%s", page)
	}
}
