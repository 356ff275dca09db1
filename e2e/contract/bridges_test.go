package contract_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// bridgeScenario triggers child pipelines from a project's repository: a bridge whose
// child is created and one whose file is missing, read through …/bridges, the child
// pipeline and the failed bridge job; cancelling the parent then cancels the child, so
// that nothing of it is left for the runner of the scenarios after this one.
func bridgeScenario(t *testing.T, c *client, inst *jobapitest.Instance) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed for the bridges scenario")
	}
	root := t.TempDir()
	bare, work := filepath.Join(root, "repo.git"), filepath.Join(root, "work")
	gitEnv := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=jobapi", "GIT_AUTHOR_EMAIL=jobapi@example.com",
		"GIT_COMMITTER_NAME=jobapi", "GIT_COMMITTER_EMAIL=jobapi@example.com")
	run := func(dir string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, gitEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out[:max(0, len(out)-1)])
	}
	run(root, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	run(root, "init", "--quiet", "--initial-branch=main", work)
	if err := os.WriteFile(filepath.Join(work, "child.yml"), []byte("child-job:\n  script: echo child\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", ".")
	run(work, "commit", "--quiet", "-m", "child")
	sha := run(work, "rev-parse", "HEAD")
	run(work, "push", "--quiet", bare, "main")

	var project api.Project
	c.decode(&project, http.StatusCreated, "POST", "/api/v4/projects", jsonBody(t, map[string]any{"name": "bridges", "repo_url": "file://" + bare}), admin)
	var parent api.Pipeline
	c.decode(&parent, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", project.ID), jsonBody(t, map[string]any{
		"ref": "main", "sha": sha, "ci_config": "child:\n  trigger: {include: child.yml, strategy: depend}\n" +
			"missing:\n  trigger: {include: missing.yml}\n"}), admin)
	if _, err := inst.Server.Bridges.CreateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var bridges []api.Bridge
	c.decode(&bridges, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/bridges", project.ID, parent.ID), nil, admin)
	byName := map[string]api.Bridge{}
	for _, b := range bridges {
		byName[b.Name] = b
	}
	child := byName["child"].DownstreamPipeline
	if len(bridges) != 2 || child == nil || byName["child"].Status != "running" || byName["missing"].Status != "failed" {
		t.Fatalf("bridges = %+v, want child running with its pipeline and missing failed", bridges)
	}
	var cp api.Pipeline
	c.decode(&cp, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d", project.ID, child.ID), nil, admin)
	if cp.Source != "parent_pipeline" || cp.ParentPipelineID == nil || *cp.ParentPipelineID != parent.ID {
		t.Errorf("child pipeline = %+v, want source parent_pipeline and its parent", cp)
	}
	var failed api.JobDetail
	c.decode(&failed, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d", project.ID, byName["missing"].ID), nil, admin)
	if failed.FailureReason == nil || *failed.FailureReason != "downstream_pipeline_creation_failed" {
		t.Errorf("missing bridge = %+v, want downstream_pipeline_creation_failed", failed)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/999999/bridges", project.ID), nil, admin)
	c.do(http.StatusOK, "POST", path("/api/v4/projects/%d/pipelines/%d/cancel", project.ID, parent.ID), nil, admin)
	c.decode(&cp, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d", project.ID, child.ID), nil, admin)
	if cp.Status != "canceled" {
		t.Errorf("child after its parent's cancel: %s", cp.Status)
	}
}
