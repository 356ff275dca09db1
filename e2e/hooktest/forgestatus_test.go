package hooktest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// syncBuffer is a log writer the replica and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestForgeStatuses posts every state of a project's pipeline to a receiver shaped like
// each forge: the path of its statuses API, its authorization header, its JSON body; the
// forge's token is never in an answer, the delivery log or the server's log, even when the
// forge echoes it in an error.
func TestForgeStatuses(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Log: logs, Configure: func(c *server.Config) {
		allowLocal(c)
		c.HooksRetryBackoff = 100 * time.Millisecond
	}})
	for _, fc := range []struct {
		forge, token, prefix, repo, path, auth string
	}{
		{"github", "ghp_0123456789abcdefSECRET", "", "acme/app", "/repos/acme/app/statuses/", "Bearer ghp_0123456789abcdefSECRET"},
		{"gitea", "gitea0123456789abcdefSECRET", "/api/v1", "acme/app", "/api/v1/repos/acme/app/statuses/", "token gitea0123456789abcdefSECRET"},
		{"gitlab", "glpat-0123456789abcdefSECRET", "/api/v4", "acme/app", "/api/v4/projects/acme%2Fapp/statuses/", ""},
	} {
		t.Run(fc.forge, func(t *testing.T) {
			pid := newProject(t, inst)
			sha := strings.Repeat(fmt.Sprintf("%x", len(fc.forge)), 40)
			rc := newReceiver(t, func(r received, n int) (int, string) {
				if n == 1 { // the first answer echoes the credentials, as a careless forge might
					return http.StatusUnauthorized, fmt.Sprintf(`{"message":"bad credentials %s %s"}`,
						r.Header.Get("Authorization"), r.Header.Get("PRIVATE-TOKEN"))
				}
				return http.StatusCreated, `{"id":1}`
			})
			var st api.ForgeStatus
			inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/forge_status", pid), map[string]any{
				"forge": fc.forge, "api_url": rc.URL + fc.prefix, "repository": fc.repo, "token": fc.token}, &st)
			if !st.TokenPresent || st.Context != "jobapi/pipeline" || st.Forge != fc.forge {
				t.Fatalf("settings %+v", st)
			}
			// Each state is waited for before the next, so that every one is seen by a pass.
			stateSent := func(state string, times int) func([]received) bool {
				return func(got []received) bool {
					n := 0
					for _, r := range got {
						var body struct {
							State string `json:"state"`
						}
						_ = json.Unmarshal(r.Body, &body)
						if body.State == state {
							n++
						}
					}
					return n >= times
				}
			}
			p := inst.CreateYAML(t, pid, sha, "build:\n  script: make\n")
			rc.waitFor(t, 30*time.Second, "the pending status, refused then taken", stateSent("pending", 2))
			r := inst.NewRunner(t)
			job := r.Take(t)
			if fc.forge == "gitlab" {
				rc.waitFor(t, 30*time.Second, "the running status", stateSent("running", 1))
			} else {
				rc.waitFor(t, 30*time.Second, "the running status (pending on "+fc.forge+")", stateSent("pending", 3))
			}
			r.Finish(t, job, runnerclient.StateSuccess, "")
			got := rc.waitFor(t, 30*time.Second, "the success status", stateSent("success", 1))
			var states []string
			for _, r := range got {
				if r.Method != "POST" || r.Path != fc.path+sha {
					t.Errorf("%s %s: want POST %s%s", r.Method, r.Path, fc.path, sha)
				}
				var body map[string]any
				if err := json.Unmarshal(r.Body, &body); err != nil {
					t.Fatalf("body %s: %v", r.Body, err)
				}
				target := fmt.Sprintf("%s/projects/%d/pipelines/%d", inst.URL, pid, p.ID)
				if fc.forge == "gitlab" {
					if r.Header.Get("PRIVATE-TOKEN") != fc.token || body["name"] != "jobapi/pipeline" || body["target_url"] != target || body["ref"] != "main" {
						t.Errorf("GitLab status %v %s: want PRIVATE-TOKEN, name, target_url %s, ref main", r.Header, r.Body, target)
					}
				} else if r.Header.Get("Authorization") != fc.auth || body["context"] != "jobapi/pipeline" || body["target_url"] != target ||
					body["description"] == "" {
					t.Errorf("%s status %v %s: want %q, context, target_url %s", fc.forge, r.Header, r.Body, fc.auth, target)
				}
				states = append(states, fmt.Sprint(body["state"]))
			}
			// The first, refused, attempt was retried: pending twice (refused, then taken).
			want := map[string][]string{"github": {"pending", "pending", "pending", "success"}, "gitea": {"pending", "pending", "pending", "success"},
				"gitlab": {"pending", "pending", "running", "success"}}[fc.forge]
			if fmt.Sprint(states) != fmt.Sprint(want) {
				t.Errorf("states posted %v, want %v", states, want)
			}
			events := fmt.Sprintf("/api/v4/projects/%d/forge_status/events?per_page=100", pid)
			var log []api.HookEvent
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				inst.MustDo(t, http.StatusOK, "GET", events, nil, &log) // the last attempt is recorded after its answer
				if len(log) >= len(got) || time.Now().After(deadline) {
					break
				}
			}
			if len(log) != len(got) || log[len(log)-1].ResponseStatus != "401" || log[len(log)-1].Trigger != "commit_status" {
				t.Errorf("log %+v: want every attempt, the oldest the 401", log)
			}
			for _, path := range []string{events, fmt.Sprintf("/api/v4/projects/%d/forge_status", pid)} {
				_, raw := inst.Do(t, "GET", path, nil)
				if strings.Contains(string(raw), fc.token) {
					t.Errorf("GET %s shows the forge token: %s", path, raw)
				}
				if path == events && !strings.Contains(string(raw), "[MASKED]") {
					t.Errorf("the log of the refused attempt should show the echoed token masked: %s", raw)
				}
			}
		})
	}
	for _, secret := range []string{"ghp_0123456789abcdefSECRET", "gitea0123456789abcdefSECRET", "glpat-0123456789abcdefSECRET"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the server log holds a forge token %s", secret)
		}
	}
	if !strings.Contains(logs.String(), "webhook delivery failed") {
		t.Errorf("the refused attempts were not logged")
	}
}

// TestForgeStatusSettingsRefused: bad settings are a 400 naming the field, and an API on
// the local network is refused unless allowed.
func TestForgeStatusSettingsRefused(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	pid := newProject(t, inst)
	path := fmt.Sprintf("/api/v4/projects/%d/forge_status", pid)
	for _, bad := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{}, "forge is missing"},
		{map[string]any{"forge": "svn", "repository": "a/b", "token": "x"}, "forge"},
		{map[string]any{"forge": "github", "repository": "a/b"}, "token is missing"},
		{map[string]any{"forge": "github", "token": "x"}, "repository is missing"},
		{map[string]any{"forge": "github", "repository": "just-a-name", "token": "x"}, "owner/name"},
		{map[string]any{"forge": "gitea", "repository": "a/b", "token": "x"}, "api_url"},
		{map[string]any{"forge": "github", "repository": "a/b", "token": "x", "api_url": "http://127.0.0.1:3000"}, "local network"},
		{map[string]any{"forge": "github", "repository": "a/b", "token": "x", "api_url": "https://u:p@api.github.com"}, "api_url"},
	} {
		resp, body := inst.Do(t, "PUT", path, bad.body)
		if msg := jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest); !strings.Contains(msg, bad.want) {
			t.Errorf("PUT %v: %q, want it to name %q", bad.body, msg, bad.want)
		}
	}
	inst.MustDo(t, http.StatusNotFound, "GET", path, nil, nil)
	inst.MustDo(t, http.StatusNotFound, "PUT", "/api/v4/projects/99999/forge_status",
		map[string]any{"forge": "github", "repository": "a/b", "token": "x"}, nil)
	form := url.Values{"forge": {"github"}, "repository": {"acme/app"}, "token": {"t0k"}}
	resp, body := inst.Do(t, "PUT", path, form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	var st api.ForgeStatus
	inst.MustDo(t, http.StatusOK, "GET", path, nil, &st)
	if st.APIURL != "https://api.github.com" || !st.TokenPresent {
		t.Errorf("settings %+v: want GitHub's API by default and the token kept", st)
	}
	inst.MustDo(t, http.StatusNoContent, "DELETE", path, nil, nil)
	inst.MustDo(t, http.StatusNotFound, "DELETE", path, nil, nil)
}
