// Package pushtest_test checks that pushes start pipelines: forges' webhooks (GitHub,
// Gitea, GitLab), signed with the project's secret and built from their own example
// payloads, against a real bare repository (file://) that the pipeline is compiled from;
// and polling of that repository, with replicas racing for the same push.
package pushtest_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const secret = "s3cret-for-webhooks-0123456789"

// repo is a bare repository and a work tree that pushes to it.
type repo = jobapitest.GitRepo

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return jobapitest.Git(t, dir, args...)
}

func newRepo(t *testing.T) *repo { return jobapitest.NewGitRepo(t) }

// ciConfig builds on every push; its docs job only when docs/ changed since before_sha,
// and its mr job only in merge request pipelines, where it shows GitLab's variables.
const ciConfig = `
stages: [build, test]
build:
  stage: build
  script: make
docs:
  stage: test
  script: make docs
  rules:
    - changes: [docs/**/*]
mr:
  stage: test
  script: echo "$CI_MERGE_REQUEST_IID $CI_MERGE_REQUEST_SOURCE_BRANCH_NAME"
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
`

// project creates a project on the repository with the webhook secret set.
func project(t *testing.T, inst *jobapitest.Instance, r *repo) int64 {
	t.Helper()
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + r.Bare}, &p)
	var st api.PushSettings
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", p.ID), map[string]any{"webhook_secret": secret}, &st)
	if !st.WebhookSecretSet || !strings.HasSuffix(st.ReceiveURLs["github"], fmt.Sprintf("/api/v4/projects/%d/hooks/inbound/github", p.ID)) {
		t.Fatalf("push settings %+v: want the secret set and the receive URLs", st)
	}
	return p.ID
}

// example reads a forge's example payload (builds/pushes/testdata) and sets fields in it:
// each edit is a path of object keys and the value at its end.
func example(t *testing.T, file string, edits map[string]any) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(jobapitest.ModuleRoot(t), "builds", "pushes", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for path, v := range edits {
		keys := strings.Split(path, ".")
		m := doc
		for _, k := range keys[:len(keys)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				t.Fatalf("%s: no object at %s", file, k)
			}
			m = next
		}
		m[keys[len(keys)-1]] = v
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hmacHex(body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// deliver sends a webhook as forge signs it (sign false: unsigned) and returns the answer.
func deliver(t *testing.T, base string, projectID int64, forge, event, delivery string, body []byte, hdr ...string) (*http.Response, api.WebhookResult, []byte) {
	t.Helper()
	var h []string
	switch forge {
	case "github":
		h = []string{"X-GitHub-Event", event, "X-GitHub-Delivery", delivery, "X-Hub-Signature-256", "sha256=" + hmacHex(body)}
	case "gitea":
		h = []string{"X-Gitea-Event", event, "X-Gitea-Delivery", delivery, "X-Gitea-Signature", hmacHex(body)}
	case "gitlab":
		h = []string{"X-Gitlab-Event", event, "X-Gitlab-Event-UUID", delivery, "X-Gitlab-Token", secret}
	}
	h = append(h, hdr...) // later ones win: a test's own signature replaces the right one
	resp, raw := jobapitest.Send(t, base, "POST", fmt.Sprintf("/api/v4/projects/%d/hooks/inbound/%s", projectID, forge), body, h...)
	var out api.WebhookResult
	_ = json.Unmarshal(raw, &out)
	return resp, out, raw
}

func pipelineCount(t *testing.T, inst *jobapitest.Instance, projectID int64) int {
	t.Helper()
	return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines WHERE project_id = $1", projectID)
}

func getPipeline(t *testing.T, inst *jobapitest.Instance, projectID, id int64) api.Pipeline {
	t.Helper()
	var p api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", jobapitest.PipelinePath(projectID, id), nil, &p)
	return p
}

func jobNames(p api.Pipeline) string {
	var names []string
	for _, j := range p.Jobs {
		names = append(names, j.Name)
	}
	return strings.Join(names, ",")
}
