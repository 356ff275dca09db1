package pushtest_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/tokenguard"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// Wrong signatures spend a budget per client address, shared by the replicas through
// Redis; past it every delivery from the address is refused with 429 and Retry-After,
// a rightly signed one too, until the minute (moved by the test's clock) ends. Right
// signatures never spend it.
func TestWebhookSignatureGuessingThrottled(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, RateLimitCallTimeout: 10 * time.Second})
	other := inst.Replica(t, jobapitest.Options{Now: clock.Now, RateLimitCallTimeout: 10 * time.Second})
	r := newRepo(t)
	first := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	id := project(t, inst, r)
	push := example(t, "github/push-branch-created.json", map[string]any{"ref": "refs/heads/main", "after": first})
	wrong := []string{"X-Hub-Signature-256", "sha256=" + strings.Repeat("ab", 32)}
	limit := tokenguard.DefaultWebhookFailuresPerClient

	// More right deliveries than the budget holds: none of them is counted.
	for i := range limit + 5 {
		resp, _, raw := deliver(t, inst.URL, id, "github", "ping", fmt.Sprintf("ping-%d", i), example(t, "github/ping.json", nil))
		jobapitest.WantStatus(t, resp, raw, http.StatusAccepted)
	}
	for i := range limit {
		resp, _, raw := deliver(t, inst.URL, id, "github", "push", fmt.Sprintf("guess-%d", i), push, wrong...)
		jobapitest.WantJSONError(t, resp, raw, http.StatusUnauthorized)
	}
	resp, _, raw := deliver(t, inst.URL, id, "github", "push", "guess-past", push, wrong...)
	wantThrottled(t, resp, raw, "the wrong signature past the budget")
	resp, _, raw = deliver(t, inst.URL, id, "github", "push", "right-while-throttled", push)
	wantThrottled(t, resp, raw, "a right signature past the budget")
	if n := pipelineCount(t, inst, id); n != 0 {
		t.Fatalf("%d pipelines while throttled, want 0", n)
	}

	// The other replica counts into the same Redis budget: it refuses a wrong signature
	// long before a budget of its own would be spent (it counts up to half of one
	// locally before asking Redis), and then a right one too.
	refusedAfter := 0
	for i := range limit/2 + 1 {
		resp, _, raw := deliver(t, other.URL, id, "github", "push", fmt.Sprintf("guess-other-%d", i), push, wrong...)
		if resp.StatusCode == http.StatusTooManyRequests {
			refusedAfter = i + 1
			break
		}
		jobapitest.WantJSONError(t, resp, raw, http.StatusUnauthorized)
	}
	if refusedAfter == 0 {
		t.Fatalf("the second replica took %d more wrong signatures without a 429: it does not share the budget", limit/2+1)
	}
	resp, _, raw = deliver(t, other.URL, id, "github", "push", "right-other-while-throttled", push)
	wantThrottled(t, resp, raw, "a right signature to the second replica")
	if n := pipelineCount(t, inst, id); n != 0 {
		t.Fatalf("%d pipelines while throttled, want 0", n)
	}

	// The next window: a right delivery goes through, once.
	clock.Add(time.Minute)
	resp, out, raw := deliver(t, inst.URL, id, "github", "push", "right-after-window", push)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if out.Result != "created" || out.PipelineID == 0 {
		t.Errorf("answer %+v: want a created pipeline", out)
	}
	if n := pipelineCount(t, inst, id); n != 1 {
		t.Errorf("%d pipelines after the window, want 1", n)
	}
	t.Logf("second replica refused after %d wrong signatures of its own", refusedAfter)
}

// A project's budget counts wrong signatures from every address; past it the project's
// deliveries are refused, while other projects' are not.
func TestWebhookSignatureGuessingPerProject(t *testing.T) {
	t.Parallel()
	const perProject = 3
	inst := jobapitest.Start(t, jobapitest.Options{RateLimitCallTimeout: 10 * time.Second, Configure: func(c *server.Config) {
		c.RateLimitWebhookSignatureFailures = 0 // the test has one address: see the project's budget alone
		c.RateLimitWebhookSignatureFailuresPerProject = perProject
	}})
	r := newRepo(t)
	r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	id := project(t, inst, r)
	var p struct{ ID int64 }
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "bystander", "repo_url": "file://" + r.Bare}, &p)
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", p.ID), map[string]any{"webhook_secret": secret}, nil)
	bystander := p.ID
	wrong := []string{"X-Gitlab-Token", secret + "x"}
	body := example(t, "github/ping.json", nil)
	for i := range perProject {
		resp, _, raw := deliver(t, inst.URL, id, "gitlab", "Issue Hook", "guess-"+strconv.Itoa(i), body, wrong...)
		jobapitest.WantJSONError(t, resp, raw, http.StatusUnauthorized)
	}
	resp, _, raw := deliver(t, inst.URL, id, "gitlab", "Issue Hook", "guess-past", body, wrong...)
	wantThrottled(t, resp, raw, "the project's wrong signature past its budget")
	resp, _, raw = deliver(t, inst.URL, id, "gitlab", "Issue Hook", "right", body)
	wantThrottled(t, resp, raw, "the project's right signature past its budget")
	resp, _, raw = deliver(t, inst.URL, bystander, "gitlab", "Issue Hook", "right", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusAccepted)
}

func wantThrottled(t *testing.T, resp *http.Response, raw []byte, what string) {
	t.Helper()
	if msg := jobapitest.WantJSONError(t, resp, raw, http.StatusTooManyRequests); !strings.Contains(msg, "wrong webhook signatures") {
		t.Errorf("%s: message %q, want it to say why", what, msg)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("%s: Retry-After %q, want 1 to 60 seconds", what, resp.Header.Get("Retry-After"))
	}
}
