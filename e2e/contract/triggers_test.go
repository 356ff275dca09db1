package contract_test

import (
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// triggerScheduleScenario creates pipelines from a repository with a trigger token (both
// routes) and a schedule's play, and reads and edits both APIs; the pipelines are canceled
// so that nothing is left for the runner of the scenarios after this one.
func triggerScheduleScenario(t *testing.T, c *client) {
	t.Helper()
	root := t.TempDir()
	bare, work := filepath.Join(root, "repo.git"), filepath.Join(root, "work")
	gitEnv := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=jobapi", "GIT_AUTHOR_EMAIL=jobapi@example.com",
		"GIT_COMMITTER_NAME=jobapi", "GIT_COMMITTER_EMAIL=jobapi@example.com")
	run := func(dir string, args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run(root, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	run(root, "init", "--quiet", "--initial-branch=main", work)
	if err := os.WriteFile(filepath.Join(work, ".gitlab-ci.yml"), []byte("job:\n  script: echo $CI_PIPELINE_SOURCE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", ".")
	run(work, "commit", "--quiet", "-m", "ci")
	run(work, "push", "--quiet", bare, "main")
	var project api.Project
	c.decode(&project, http.StatusCreated, "POST", "/api/v4/projects", jsonBody(t, map[string]any{"name": "triggered", "repo_url": "file://" + bare}), admin)
	var pipelines []int64
	defer func() {
		for _, id := range pipelines {
			c.do(http.StatusOK, "POST", path("/api/v4/projects/%d/pipelines/%d/cancel", project.ID, id), nil, admin)
		}
	}()

	triggers := path("/api/v4/projects/%d/triggers", project.ID)
	var tr api.Trigger
	c.decode(&tr, http.StatusCreated, "POST", triggers, jsonBody(t, map[string]any{"description": "deploy"}), admin)
	c.do(http.StatusBadRequest, "POST", triggers, jsonBody(t, map[string]any{}), admin, invalid)
	c.do(http.StatusOK, "GET", triggers, nil, admin)
	one := path("%s/%d", triggers, tr.ID)
	c.do(http.StatusOK, "GET", one, nil, admin)
	c.do(http.StatusOK, "PUT", one, formBody(url.Values{"description": {"deploy v2"}}), admin)
	var p api.Pipeline
	c.decode(&p, http.StatusCreated, "POST", path("/api/v4/projects/%d/trigger/pipeline", project.ID),
		jsonBody(t, map[string]any{"token": tr.Token, "ref": "main", "variables": map[string]string{"A": "1"}}))
	pipelines = append(pipelines, p.ID)
	c.decode(&p, http.StatusCreated, "POST", path("/api/v4/projects/%d/ref/main/trigger/pipeline?token=%s", project.ID, tr.Token), nil)
	pipelines = append(pipelines, p.ID)
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/trigger/pipeline", project.ID),
		formBody(url.Values{"token": {"glptt-unknown"}, "ref": {"main"}}))
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/ref/main/trigger/pipeline", project.ID), nil)
	c.do(http.StatusNoContent, "DELETE", one, nil, admin)
	c.do(http.StatusNotFound, "DELETE", one, nil, admin)

	schedules := path("/api/v4/projects/%d/pipeline_schedules", project.ID)
	var sc api.PipelineSchedule
	c.decode(&sc, http.StatusCreated, "POST", schedules,
		jsonBody(t, map[string]any{"description": "nightly", "ref": "main", "cron": "0 2 * * *", "cron_timezone": "Europe/Berlin"}), admin)
	c.do(http.StatusBadRequest, "POST", schedules, jsonBody(t, map[string]any{"description": "x", "ref": "main", "cron": "0 25 * * *"}), admin)
	c.do(http.StatusOK, "GET", schedules+"?scope=active", nil, admin)
	sone := path("%s/%d", schedules, sc.ID)
	c.do(http.StatusOK, "PUT", sone, jsonBody(t, map[string]any{"cron": "30 3 * * *"}), admin)
	c.do(http.StatusCreated, "POST", sone+"/variables", jsonBody(t, map[string]any{"key": "NIGHTLY", "value": "yes"}), admin)
	c.do(http.StatusBadRequest, "POST", sone+"/variables", jsonBody(t, map[string]any{"key": "NIGHTLY", "value": "again"}), admin)
	c.do(http.StatusOK, "PUT", sone+"/variables/NIGHTLY", jsonBody(t, map[string]any{"value": "no"}), admin)
	var played struct {
		PipelineID int64 `json:"pipeline_id"`
	}
	c.decode(&played, http.StatusCreated, "POST", sone+"/play", nil, admin)
	pipelines = append(pipelines, played.PipelineID)
	var got api.PipelineSchedule
	c.decode(&got, http.StatusOK, "GET", sone, nil, admin)
	if got.LastPipeline == nil || got.LastPipeline.ID != played.PipelineID || len(got.Variables) != 1 {
		t.Errorf("schedule after play = %+v", got)
	}
	c.do(http.StatusOK, "GET", sone+"/pipelines?sort=desc", nil, admin)
	c.do(http.StatusNotImplemented, "POST", sone+"/take_ownership", nil, admin)
	c.do(http.StatusAccepted, "DELETE", sone+"/variables/NIGHTLY", nil, admin)
	c.do(http.StatusNoContent, "DELETE", sone, nil, admin)
	c.do(http.StatusNotFound, "GET", sone, nil, admin)
}
