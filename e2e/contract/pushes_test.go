package contract_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// pushScenario sets a project's push settings and sends GitHub-signed webhooks: a push that
// creates a pipeline, its replay, an event that is ignored, an unsigned one, an unknown
// forge; then polls the remote. The pipeline's one job is manual, so that nothing is left
// for the runner of the scenarios after this one.
func pushScenario(t *testing.T, c *client) {
	t.Helper()
	repo := jobapitest.NewGitRepo(t)
	sha := repo.Commit(map[string]string{".gitlab-ci.yml": "deploy:\n  script: ./deploy\n  when: manual\n"})
	bare := repo.Bare

	var project api.Project
	c.decode(&project, http.StatusCreated, "POST", "/api/v4/projects", jsonBody(t, map[string]any{"name": "pushed", "repo_url": "file://" + bare}), admin)
	settings := path("/api/v4/projects/%d/push_settings", project.ID)
	var st api.PushSettings
	c.decode(&st, http.StatusOK, "GET", settings, nil, admin)
	const secret = "contract-webhook-secret-0123"
	c.decode(&st, http.StatusOK, "PUT", settings, jsonBody(t, map[string]any{"webhook_secret": secret, "poll_interval": 0}), admin)
	if !st.WebhookSecretSet {
		t.Fatalf("push settings = %+v, want the secret set", st)
	}
	c.do(http.StatusBadRequest, "PUT", settings, jsonBody(t, map[string]any{"poll_interval": -1}), admin, invalid)

	payload := []byte(`{"ref": "refs/heads/main", "before": "0000000000000000000000000000000000000000", "after": "` + sha + `", "created": true, "deleted": false}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(payload)
	signed := header("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	receive := path("/api/v4/projects/%d/hooks/inbound/github", project.ID)
	var res api.WebhookResult
	c.decode(&res, http.StatusCreated, "POST", receive, rawBody("application/json", payload), signed,
		header("X-GitHub-Event", "push"), header("X-GitHub-Delivery", "contract-1"))
	if res.Result != "created" || res.PipelineID == 0 {
		t.Fatalf("webhook = %+v, want a pipeline", res)
	}
	c.decode(&res, http.StatusOK, "POST", receive, rawBody("application/json", payload), signed,
		header("X-GitHub-Event", "push"), header("X-GitHub-Delivery", "contract-1"))
	c.decode(&res, http.StatusAccepted, "POST", receive, rawBody("application/json", payload), signed,
		header("X-GitHub-Event", "issues"), header("X-GitHub-Delivery", "contract-2"))
	c.do(http.StatusUnauthorized, "POST", receive, rawBody("application/json", payload),
		header("X-GitHub-Event", "push"), header("X-GitHub-Delivery", "contract-3"))
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/hooks/inbound/bitbucket", project.ID), rawBody("application/json", payload), invalid)

	var polled api.PollResult
	c.decode(&polled, http.StatusOK, "POST", path("/api/v4/projects/%d/push_settings/poll", project.ID), nil, admin)
	if polled.Polled != 1 || polled.Started != 0 {
		t.Errorf("poll = %+v, want one poll that records heads only", polled)
	}
}
