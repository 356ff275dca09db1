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
	c.do(http.StatusNoContent, "DELETE", one, nil, admin)
	c.do(http.StatusNotFound, "DELETE", one, nil, admin)
}
