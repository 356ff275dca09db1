package gitlabrunner_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// statusReceiver is a real HTTP server shaped like GitHub's commit statuses API
// (POST /repos/:owner/:repo/statuses/:sha): the forge side a project reports to.
type statusReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []forgeStatus
}

type forgeStatus struct {
	Path, Authorization       string
	State, Context, TargetURL string
	Description               string
	At                        time.Time
}

func newStatusReceiver(t *testing.T) *statusReceiver {
	rc := &statusReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			State       string `json:"state"`
			Context     string `json:"context"`
			TargetURL   string `json:"target_url"`
			Description string `json:"description"`
		}
		_ = json.Unmarshal(raw, &body)
		rc.mu.Lock()
		rc.got = append(rc.got, forgeStatus{Path: r.Method + " " + r.URL.Path, Authorization: r.Header.Get("Authorization"),
			State: body.State, Context: body.Context, TargetURL: body.TargetURL, Description: body.Description, At: time.Now()})
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// statuses are the statuses received for one commit, in order.
func (rc *statusReceiver) statuses(repo, sha string) []forgeStatus {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []forgeStatus
	for _, s := range rc.got {
		if s.Path == "POST /repos/"+repo+"/statuses/"+sha {
			out = append(out, s)
		}
	}
	return out
}

const pushedConfig = `
build:
  script:
    - cat README.md
    - echo "built $CI_COMMIT_SHORT_SHA of $CI_COMMIT_REF_NAME from a $CI_PIPELINE_SOURCE, before $CI_COMMIT_BEFORE_SHA"
`

// A push is all it takes: a commit pushed to a file:// repository that jobapi polls, and a
// commit announced by a GitHub-format push webhook, each start a pipeline that the real
// gitlab-runner (GITLAB_RUNNER_BIN, shell executor) clones and runs to its end, and the
// forge's commit statuses API receives the pipeline's states for that commit. What it
// saw is logged (go test -v): the forge's requests and the runner's.
func TestPushesRunOnRealRunner(t *testing.T) {
	bin := os.Getenv("GITLAB_RUNNER_BIN")
	if bin == "" {
		t.Skip("GITLAB_RUNNER_BIN is not set: no real gitlab-runner ran a pipeline started by a push")
	}
	t.Parallel()
	// Sweeper: every background worker runs as in jobapi serve, the push poller among them.
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.HooksAllowLocalNetwork = true // the forge is a local server
		c.HooksRetryBackoff = 100 * time.Millisecond
	}})
	forge := newStatusReceiver(t)

	startRealRunner(t, inst, bin, "pushes") // it runs until the test ends

	// project makes a repository with a first commit and a project on it that reports
	// statuses to the forge as repository acme/<name>.
	const forgeToken = "ghp_pushes0123456789abcdef"
	project := func(t *testing.T, name string) (*jobapitest.GitRepo, string, int64) {
		repo := jobapitest.NewGitRepo(t)
		first := repo.Commit(map[string]string{".gitlab-ci.yml": pushedConfig, "README.md": "first\n"})
		var p api.Project
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": name, "repo_url": "file://" + repo.Bare}, &p)
		var st api.ForgeStatus
		inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/forge_status", p.ID),
			map[string]any{"forge": "github", "api_url": forge.URL, "repository": "acme/" + name, "token": forgeToken}, &st)
		return repo, first, p.ID
	}

	// ranToTheEnd waits for the one pipeline of sha to succeed on the real runner, checks
	// what the job printed and the forge's statuses, and logs both.
	ranToTheEnd := func(t *testing.T, projectID int64, name, sha, before, readme string) {
		var pipes []api.Pipeline
		testenv.Eventually(t, 30*time.Second, "a pipeline for the pushed commit", func() bool {
			inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines?sha=%s", projectID, sha), nil, &pipes)
			return len(pipes) > 0
		})
		if len(pipes) != 1 || pipes[0].Source != "push" || pipes[0].Ref != "main" {
			t.Fatalf("pipelines of %s: %+v; want one push pipeline of main", sha, pipes)
		}
		var p api.Pipeline
		testenv.Eventually(t, 2*time.Minute, "the pipeline run to its end by gitlab-runner", func() bool {
			inst.MustDo(t, http.StatusOK, "GET", jobapitest.PipelinePath(projectID, pipes[0].ID), nil, &p)
			return p.Status == "success" || p.Status == "failed" || p.Status == "canceled"
		})
		if p.Status != "success" || len(p.Jobs) != 1 {
			t.Fatalf("pipeline %d: %s with %d jobs; want success", p.ID, p.Status, len(p.Jobs))
		}
		_, trace := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", projectID, p.Jobs[0].ID), nil)
		want := fmt.Sprintf("built %s of main from a push, before %s", sha[:8], before)
		if !strings.Contains(string(trace), readme) || !strings.Contains(string(trace), want) {
			t.Fatalf("the job's log lacks the pushed README (%q) or %q:\n%s", readme, want, trace)
		}
		var got []forgeStatus
		testenv.Eventually(t, 30*time.Second, "the success status on the forge", func() bool {
			got = forge.statuses("acme/"+name, sha)
			return len(got) > 0 && got[len(got)-1].State == "success"
		})
		target := fmt.Sprintf("%s/projects/%d/pipelines/%d", inst.URL, projectID, p.ID)
		for _, s := range got {
			if s.Authorization != "Bearer "+forgeToken || s.Context != "jobapi/pipeline" || s.TargetURL != target {
				t.Errorf("status %+v: want the project's token, context jobapi/pipeline, target %s", s, target)
			}
			t.Logf("forge received %s state=%s context=%s description=%q", s.Path, s.State, s.Context, s.Description)
		}
		// The statuses follow the pipeline as the event reader finds it about once a second
		// (docs/webhooks.md): a pipeline the idle runner finished within that second may send
		// success alone, never a state out of order.
		for i, s := range got[:len(got)-1] {
			if s.State != "pending" {
				t.Errorf("status %d of %d is %s; only pending comes before the last", i+1, len(got), s.State)
			}
		}
		t.Logf("pipeline %d (%s, %s) ran on gitlab-runner: %s", p.ID, p.Source, p.Sha[:8], want)
	}

	t.Run("polled file:// repository", func(t *testing.T) {
		repo, first, id := project(t, "polled")
		var st api.PushSettings
		inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), map[string]any{"poll_interval": 5}, &st)
		// The first poll records the heads; only a later push starts a pipeline.
		testenv.Eventually(t, 30*time.Second, "the first poll", func() bool {
			inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), nil, &st)
			return st.PolledAt != nil
		})
		second := repo.Commit(map[string]string{"README.md": "pushed and polled\n"})
		ranToTheEnd(t, id, "polled", second, first, "pushed and polled")
	})

	t.Run("GitHub push webhook", func(t *testing.T) {
		repo, first, id := project(t, "hooked")
		const secret = "s3cret-for-webhooks-0123456789"
		var st api.PushSettings
		inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), map[string]any{"webhook_secret": secret}, &st)
		second := repo.Commit(map[string]string{"README.md": "pushed and announced\n"})

		// GitHub's own example push event (npm's @octokit/webhooks-examples), made this push.
		raw, err := os.ReadFile(filepath.Join(jobapitest.ModuleRoot(t), "builds", "pushes", "testdata", "github", "push-branch-created.json"))
		if err != nil {
			t.Fatal(err)
		}
		var event map[string]any
		if err := json.Unmarshal(raw, &event); err != nil {
			t.Fatal(err)
		}
		event["ref"], event["before"], event["after"], event["created"] = "refs/heads/main", first, second, false
		body, _ := json.Marshal(event)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		resp, answer := jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/hooks/inbound/github", id), body,
			"X-GitHub-Event", "push", "X-GitHub-Delivery", "7c9a2e10-real-runner-push", "X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		jobapitest.WantStatus(t, resp, answer, http.StatusCreated)
		t.Logf("POST /api/v4/projects/%d/hooks/inbound/github (X-GitHub-Event: push): %d %s", id, resp.StatusCode, answer)
		ranToTheEnd(t, id, "hooked", second, first, "pushed and announced")
	})

	for _, route := range []struct{ method, path string }{
		{"POST", "/api/v4/jobs/request"}, {"PUT", "/api/v4/jobs/{job_id}"}, {"PATCH", "/api/v4/jobs/{job_id}/trace"},
	} {
		for _, code := range []int{http.StatusOK, http.StatusCreated, http.StatusNoContent, http.StatusAccepted} {
			if n := requests(t, inst, route.method, route.path, code); n > 0 {
				t.Logf("gitlab-runner sent %s %s answered %d: %v times", route.method, route.path, code, n)
			}
		}
	}
}
