package contract_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// hooksScenario reads and edits a project's webhooks (JSON and form bodies) and reads a
// hook's delivery log.
func hooksScenario(t *testing.T, c *client, projectID int64) {
	t.Helper()
	hooks := path("/api/v4/projects/%d/hooks", projectID)
	var hk api.ProjectHook
	c.decode(&hk, http.StatusCreated, "POST", hooks, jsonBody(t, map[string]any{"url": "https://hooks.example.com/jobapi",
		"token": "contract-secret", "pipeline_events": true, "push_events": false}), admin)
	c.do(http.StatusBadRequest, "POST", hooks, jsonBody(t, map[string]any{"push_events": true}), admin)
	c.do(http.StatusOK, "GET", hooks, nil, admin)
	one := path("%s/%d", hooks, hk.ID)
	c.do(http.StatusOK, "GET", one, nil, admin)
	c.do(http.StatusOK, "PUT", one, formBody(url.Values{"job_events": {"true"}, "push_events_branch_filter": {"main"}}), admin)
	c.do(http.StatusOK, "GET", one+"/events", nil, admin)
	// Without a pipeline there is nothing to send (GitLab's "Ensure the project has CI pipelines").
	c.do(http.StatusBadRequest, "POST", one+"/test/pipeline_events", nil, admin)
	c.do(http.StatusBadRequest, "POST", one+"/test/wiki_page_events", nil, admin, invalid)
	forge := path("/api/v4/projects/%d/forge_status", projectID)
	c.do(http.StatusNotFound, "GET", forge, nil, admin)
	c.do(http.StatusBadRequest, "PUT", forge, jsonBody(t, map[string]any{"forge": "bitbucket"}), admin, invalid)
	c.do(http.StatusOK, "PUT", forge, jsonBody(t, map[string]any{"forge": "github", "repository": "acme/app", "token": "ghp_contract"}), admin)
	c.do(http.StatusOK, "PUT", forge, formBody(url.Values{"context": {"ci/jobapi"}}), admin)
	c.do(http.StatusOK, "GET", forge, nil, admin)
	c.do(http.StatusOK, "GET", forge+"/events", nil, admin)
	c.do(http.StatusNoContent, "DELETE", forge, nil, admin)
	c.do(http.StatusNoContent, "DELETE", one, nil, admin)
	c.do(http.StatusNotFound, "DELETE", one, nil, admin)
}
