package contract_test

import (
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// environmentScenario deploys to a review environment and stops it with its manual on_stop
// job, reading the environments and deployments API at each step.
func environmentScenario(t *testing.T, c *client, runnerToken, systemID string) {
	t.Helper()
	var p api.Pipeline
	c.decode(&p, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"ref": "main", "ci_config": "stages: [deploy, cleanup]\n" +
			"review:\n  stage: deploy\n  script: ./deploy\n  variables: {GIT_STRATEGY: none}\n" +
			"  environment:\n    name: review/$CI_COMMIT_REF_SLUG\n    url: https://$CI_ENVIRONMENT_SLUG.example.com\n    on_stop: stop_review\n" +
			"stop_review:\n  stage: cleanup\n  script: ./stop\n  when: manual\n  variables: {GIT_STRATEGY: none}\n" +
			"  environment:\n    name: review/$CI_COMMIT_REF_SLUG\n    action: stop\n"}), admin)
	byName := map[string]int64{}
	for _, j := range p.Jobs {
		byName[j.Name] = j.ID
	}
	var deployments []api.Deployment
	c.decode(&deployments, http.StatusOK, "GET", path("/api/v4/projects/%d/deployments?per_page=100", projectID), nil, admin)
	if len(deployments) != 1 || deployments[0].Status != "created" || deployments[0].Deployable.ID != byName["review"] {
		t.Fatalf("deployments of the new pipeline = %+v, want review's, created", deployments)
	}
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/deployments?page=0", projectID), nil, admin, invalid)

	request := jsonBody(t, map[string]any{"token": runnerToken, "system_id": systemID, "info": runnerInfo(false)})
	var job api.Job
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if job.ID != byName["review"] {
		t.Fatalf("assigned job %d, want %d (review)", job.ID, byName["review"])
	}
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(job.Token))

	var envs []api.Environment
	c.decode(&envs, http.StatusOK, "GET", path("/api/v4/projects/%d/environments", projectID), nil, admin)
	if len(envs) != 1 || envs[0].Name != "review/main" || envs[0].State != "available" {
		t.Fatalf("environments = %+v, want review/main available", envs)
	}
	one := path("/api/v4/projects/%d/environments/%d", projectID, envs[0].ID)
	var env api.Environment
	c.decode(&env, http.StatusOK, "GET", one, nil, admin)
	if env.LastDeployment == nil || env.LastDeployment.Deployable.ID != job.ID || env.LastDeployment.Status != "success" {
		t.Errorf("environment = %+v, want review's deployment as its last", env)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/environments/99999999", projectID), nil, admin)

	c.do(http.StatusOK, "POST", path("/api/v4/projects/%d/jobs/%d/play", projectID, byName["stop_review"]), nil, admin)
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if job.ID != byName["stop_review"] {
		t.Fatalf("assigned job %d, want %d (stop_review)", job.ID, byName["stop_review"])
	}
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(job.Token))
	c.decode(&env, http.StatusOK, "GET", one, nil, admin)
	if env.State != "stopped" {
		t.Errorf("environment after stop_review = %s, want stopped", env.State)
	}
}
