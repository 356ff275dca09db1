package contract_test

import (
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// resourceGroupScenario creates two pipelines whose deploy jobs share a resource group and
// reads the resource groups API while the second waits for the first.
func resourceGroupScenario(t *testing.T, c *client, runnerToken, systemID string) {
	t.Helper()
	yaml := "deploy:\n  script: ./deploy\n  variables: {GIT_STRATEGY: none}\n  resource_group: production\n"
	var first, second api.Pipeline
	c.decode(&first, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID),
		jsonBody(t, map[string]any{"ref": "main", "ci_config": yaml}), admin)
	c.decode(&second, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID),
		jsonBody(t, map[string]any{"ref": "main", "ci_config": yaml}), admin)
	if second.Jobs[0].Status != "waiting_for_resource" {
		t.Fatalf("second deploy = %s, want waiting_for_resource", second.Jobs[0].Status)
	}
	var groups []api.ResourceGroup
	c.decode(&groups, http.StatusOK, "GET", path("/api/v4/projects/%d/resource_groups", projectID), nil, admin)
	if len(groups) != 1 || groups[0].Key != "production" || groups[0].ProcessMode != "unordered" {
		t.Fatalf("resource groups = %+v, want production, unordered", groups)
	}
	one := path("/api/v4/projects/%d/resource_groups/production", projectID)
	var g api.ResourceGroup
	c.decode(&g, http.StatusOK, "GET", one, nil, admin)
	c.decode(&g, http.StatusOK, "PUT", one, jsonBody(t, map[string]any{"process_mode": "oldest_first"}), admin)
	if g.ProcessMode != "oldest_first" {
		t.Fatalf("PUT = %+v, want oldest_first", g)
	}
	c.do(http.StatusBadRequest, "PUT", one, jsonBody(t, map[string]any{"process_mode": "sometimes"}), admin, invalid)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/resource_groups/staging", projectID), nil, admin)
	var upcoming []api.JobDetail
	c.decode(&upcoming, http.StatusOK, "GET", one+"/upcoming_jobs", nil, admin)
	if len(upcoming) != 1 || upcoming[0].ID != second.Jobs[0].ID || upcoming[0].Status != "waiting_for_resource" {
		t.Fatalf("upcoming jobs = %+v, want the second deploy", upcoming)
	}

	// The first deploy runs and ends; the second gets the group.
	request := jsonBody(t, map[string]any{"token": runnerToken, "system_id": systemID, "info": runnerInfo(false)})
	var job api.Job
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if job.ID != first.Jobs[0].ID {
		t.Fatalf("assigned job %d, want %d (the first deploy)", job.ID, first.Jobs[0].ID)
	}
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(job.Token))
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if job.ID != second.Jobs[0].ID {
		t.Fatalf("assigned job %d, want %d (the second deploy)", job.ID, second.Jobs[0].ID)
	}
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(job.Token))
}
