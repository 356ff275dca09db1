package pushtest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// A GitHub push (octokit's example, pointed at the test repository's commits) creates a
// push pipeline at the event's after with its before_sha, so rules:changes compares the
// two; the same delivery again creates nothing; a tag push builds the tag; deleting a
// branch builds nothing.
func TestGitHubPushStartsPipeline(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := newRepo(t)
	first := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig, "docs/index.md": "# app\n"})
	second := r.Commit(map[string]string{"src/main.go": "package main\n"})
	id := project(t, inst, r)

	body := example(t, "github/push-branch-created.json", map[string]any{"ref": "refs/heads/main", "before": first, "after": second,
		"created": false})
	resp, out, raw := deliver(t, inst.URL, id, "github", "push", "d1b2c3d4-0000-11ee-8000-000000000001", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if out.Result != "created" || out.PipelineID == 0 || out.Event != "push" {
		t.Fatalf("answer %+v: want a created pipeline", out)
	}
	p := getPipeline(t, inst, id, out.PipelineID)
	if p.Source != "push" || p.Ref != "main" || p.Sha != second || p.BeforeSha != first {
		t.Errorf("pipeline %s %s %s before %s; want push main %s before %s", p.Source, p.Ref, p.Sha, p.BeforeSha, second, first)
	}
	if got := jobNames(p); got != "build" {
		t.Errorf("jobs %s: want build only (docs/ did not change between before and after, and it is no merge request)", got)
	}

	// The forge's redelivery, or a replay by anyone who saw the request: nothing again.
	resp, again, raw := deliver(t, inst.URL, id, "github", "push", "d1b2c3d4-0000-11ee-8000-000000000001", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusOK)
	if again.Result != "replayed" || again.PipelineID != out.PipelineID {
		t.Errorf("replay: %+v; want replayed, naming pipeline %d", again, out.PipelineID)
	}

	// A change to docs/ since before: the docs job too.
	third := r.Commit(map[string]string{"docs/index.md": "# app, documented\n"})
	body = example(t, "github/push-branch-created.json", map[string]any{"ref": "refs/heads/main", "before": second, "after": third, "created": false})
	resp, out, raw = deliver(t, inst.URL, id, "github", "push", "d1b2c3d4-0000-11ee-8000-000000000002", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if got := jobNames(getPipeline(t, inst, id, out.PipelineID)); got != "build,docs" {
		t.Errorf("jobs %s after a docs change: want build,docs", got)
	}

	// A tag pushed: a tag pipeline at its commit.
	git(t, r.Work, "tag", "v1.0")
	git(t, r.Work, "push", "--quiet", r.Bare, "v1.0")
	body = example(t, "github/push-tag-created.json", map[string]any{"ref": "refs/tags/v1.0", "after": third, "head_commit.id": third})
	resp, out, raw = deliver(t, inst.URL, id, "github", "push", "d1b2c3d4-0000-11ee-8000-000000000003", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if p := getPipeline(t, inst, id, out.PipelineID); p.Ref != "refs/tags/v1.0" || p.Sha != third || p.Source != "push" {
		t.Errorf("tag pipeline ref %s sha %s source %s; want the tag v1.0 at %s", p.Ref, p.Sha, p.Source, third)
	}

	// Deleting a tag or a branch builds nothing.
	before := pipelineCount(t, inst, id)
	resp, out, raw = deliver(t, inst.URL, id, "github", "push", "d1b2c3d4-0000-11ee-8000-000000000004", example(t, "github/push-tag-deleted.json", nil))
	jobapitest.WantStatus(t, resp, raw, http.StatusAccepted)
	if out.Result != "ignored" || !strings.Contains(out.Message, "deleted") {
		t.Errorf("deletion: %+v; want ignored as deleted", out)
	}
	if n := pipelineCount(t, inst, id); n != before {
		t.Errorf("%d pipelines after a deletion, want %d", n, before)
	}
}

// Wrong, missing or foreign signatures are 401 with nothing created; a project without a
// secret refuses every webhook; unknown events are 202 and ignored; a payload over 25 MB
// is 413; an unknown forge or project 404.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := newRepo(t)
	first := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	id := project(t, inst, r)
	body := example(t, "github/push-branch-created.json", map[string]any{"ref": "refs/heads/main", "after": first})
	path := fmt.Sprintf("/api/v4/projects/%d/hooks/inbound/", id)

	unauthorized := []struct {
		name, forge string
		hdr         []string
	}{
		{"github wrong signature", "github", []string{"X-Hub-Signature-256", "sha256=" + strings.Repeat("ab", 32)}},
		{"github signature of another body", "github", []string{"X-Hub-Signature-256", "sha256=" + hmacHex(append(bytes.Clone(body), ' '))}},
		{"github missing signature", "github", []string{"X-Hub-Signature-256", ""}},
		{"gitea wrong signature", "gitea", []string{"X-Gitea-Signature", hmacHex([]byte("{}"))}},
		{"gitlab wrong token", "gitlab", []string{"X-Gitlab-Token", secret + "x"}},
		{"gitlab missing token", "gitlab", []string{"X-Gitlab-Token", ""}},
	}
	for _, c := range unauthorized {
		event := "push"
		if c.forge == "gitlab" {
			event = "Push Hook"
		}
		resp, _, raw := deliver(t, inst.URL, id, c.forge, event, "bad-"+c.name, body, c.hdr...)
		if msg := jobapitest.WantJSONError(t, resp, raw, http.StatusUnauthorized); msg == "" {
			t.Errorf("%s: no message", c.name)
		}
	}
	if n := pipelineCount(t, inst, id); n != 0 {
		t.Fatalf("%d pipelines after refused webhooks, want 0", n)
	}

	// Events jobapi does not build: 202, as forges expect, and nothing created.
	resp, out, raw := deliver(t, inst.URL, id, "github", "issues", "ignored-1", example(t, "github/ping.json", nil))
	jobapitest.WantStatus(t, resp, raw, http.StatusAccepted)
	resp, ping, raw2 := deliver(t, inst.URL, id, "github", "ping", "ignored-2", example(t, "github/ping.json", nil))
	jobapitest.WantStatus(t, resp, raw2, http.StatusAccepted)
	resp, closed, raw3 := deliver(t, inst.URL, id, "github", "pull_request", "ignored-3", example(t, "github/pull_request-closed.json", nil))
	jobapitest.WantStatus(t, resp, raw3, http.StatusAccepted)
	if out.Result != "ignored" || ping.Result != "ignored" || closed.Result != "ignored" || pipelineCount(t, inst, id) != 0 {
		t.Errorf("ignored events: %+v %+v %+v; want ignored, no pipeline", out, ping, closed)
	}

	// Malformed payload of a known event, signed: 400 naming it.
	resp, _, raw = deliver(t, inst.URL, id, "github", "push", "malformed-1", []byte(`{"ref": 5}`))
	jobapitest.WantJSONError(t, resp, raw, http.StatusBadRequest)

	// Over 25 MB: 413 before anything is read of it.
	big := bytes.Repeat([]byte(" "), 25<<20+1)
	resp, raw = jobapitest.Send(t, inst.URL, "POST", path+"github", big, "X-GitHub-Event", "push")
	jobapitest.WantJSONError(t, resp, raw, http.StatusRequestEntityTooLarge)

	resp, raw = jobapitest.Send(t, inst.URL, "POST", path+"bitbucket", body, "X-GitHub-Event", "push")
	jobapitest.WantJSONError(t, resp, raw, http.StatusNotFound)
	resp, raw = jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/hooks/inbound/github", id+1000), body, "X-GitHub-Event", "push")
	jobapitest.WantJSONError(t, resp, raw, http.StatusNotFound)

	// Webhooks off (no secret): refused, whatever the signature.
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), map[string]any{"webhook_secret": ""}, nil)
	resp, _, raw = deliver(t, inst.URL, id, "github", "push", "off-1", body)
	if msg := jobapitest.WantJSONError(t, resp, raw, http.StatusUnauthorized); !strings.Contains(msg, "no webhook secret") {
		t.Errorf("without a secret: %q; want it said", msg)
	}

	// Settings refuse what cannot work, naming it; the secret is never shown.
	for _, bad := range []map[string]any{{"webhook_secret": "short"}, {"webhook_secret": "has a space in it, 0123456789"},
		{"poll_interval": 1}, {"poll_interval": -5}, {"poll_interval": 10 << 20}, {"poll_interval": "often"}, {"secret": secret}} {
		resp, raw := inst.Do(t, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), bad)
		jobapitest.WantJSONError(t, resp, raw, http.StatusBadRequest)
	}
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), map[string]any{"webhook_secret": secret}, nil)
	// A form body, as curl -d sends it (README's "Run it").
	resp, raw = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), "poll_interval=10",
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, raw, http.StatusOK)
	if !bytes.Contains(raw, []byte(`"poll_interval":10`)) {
		t.Errorf("settings after a form PUT: %s; want poll_interval 10", raw)
	}
	resp, raw = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), nil)
	jobapitest.WantStatus(t, resp, raw, http.StatusOK)
	if bytes.Contains(raw, []byte(secret)) || !bytes.Contains(raw, []byte(`"webhook_secret_set":true`)) {
		t.Errorf("settings %s: want the secret set and not shown", raw)
	}
	resp, raw = jobapitest.Send(t, inst.URL, "GET", fmt.Sprintf("/api/v4/projects/%d/push_settings", id), nil)
	jobapitest.WantJSONError(t, resp, raw, http.StatusUnauthorized)
}

// GitLab's merge request hook (its documented example, on a branch of the test repository)
// creates a merge_request_event pipeline whose jobs get GitLab's CI_MERGE_REQUEST_*
// variables, and whose rules:changes compare with the target branch; its push and tag
// hooks create push pipelines.
func TestGitLabMergeRequestPipeline(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := newRepo(t)
	base := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	git(t, r.Work, "checkout", "--quiet", "-b", "feature")
	head := r.Commit(map[string]string{"src/feature.go": "package main\n"})
	id := project(t, inst, r)

	body := example(t, "gitlab/merge_request.json", map[string]any{
		"object_attributes.source_branch": "feature", "object_attributes.target_branch": "main",
		"object_attributes.last_commit.id": head, "object_attributes.iid": 7})
	resp, out, raw := deliver(t, inst.URL, id, "gitlab", "Merge Request Hook", "5a1e8a7e-0000-4000-8000-000000000001", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	p := getPipeline(t, inst, id, out.PipelineID)
	if p.Source != "merge_request_event" || p.Ref != "feature" || p.Sha != head {
		t.Fatalf("pipeline %s %s %s; want a merge_request_event pipeline of feature at %s", p.Source, p.Ref, p.Sha, head)
	}
	// As GitLab: a job without rules or only: runs in branch and tag pipelines, not in merge
	// request pipelines; the mr job's rule asks for one.
	if got := jobNames(p); got != "mr" {
		t.Fatalf("jobs %s: want mr only", got)
	}
	mr := inst.NewRunner(t).TakeNamed(t, "mr")
	vars := map[string]string{}
	for _, v := range mr.Variables {
		vars[v.Key] = v.Value
	}
	want := map[string]string{"CI_PIPELINE_SOURCE": "merge_request_event", "CI_MERGE_REQUEST_IID": "7", "CI_MERGE_REQUEST_ID": "99",
		"CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "feature", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
		"CI_MERGE_REQUEST_SOURCE_BRANCH_SHA": head, "CI_MERGE_REQUEST_TITLE": "MS-Viewport", "CI_MERGE_REQUEST_EVENT_TYPE": "detached",
		"CI_MERGE_REQUEST_PROJECT_ID": fmt.Sprint(id), "CI_MERGE_REQUEST_LABELS": "API", "CI_COMMIT_SHA": head}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("job variable %s=%q, want %q", k, vars[k], v)
		}
	}
	if _, ok := vars["CI_COMMIT_BRANCH"]; ok {
		t.Error("CI_COMMIT_BRANCH is set in a merge request pipeline; GitLab sets it only in branch pipelines")
	}

	// New commits on the source branch that touch docs/: the request's diff from its merge
	// base with main has docs/ in it, so the docs job's rules:changes holds.
	docsHead := r.Commit(map[string]string{"docs/feature.md": "# feature\n"})
	body = example(t, "gitlab/merge_request.json", map[string]any{"object_attributes.action": "update", "object_attributes.oldrev": head,
		"object_attributes.source_branch": "feature", "object_attributes.target_branch": "main", "object_attributes.last_commit.id": docsHead})
	resp, out, raw = deliver(t, inst.URL, id, "gitlab", "Merge Request Hook", "5a1e8a7e-0000-4000-8000-000000000005", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if got := jobNames(getPipeline(t, inst, id, out.PipelineID)); got != "docs,mr" {
		t.Errorf("jobs %s after docs changed on the source branch: want docs,mr", got)
	}

	// A merge request update without new commits (a label, a title) builds nothing.
	body = example(t, "gitlab/merge_request.json", map[string]any{"object_attributes.action": "update", "object_attributes.oldrev": "",
		"object_attributes.source_branch": "feature", "object_attributes.last_commit.id": head})
	resp, out, raw = deliver(t, inst.URL, id, "gitlab", "Merge Request Hook", "5a1e8a7e-0000-4000-8000-000000000002", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusAccepted)

	// GitLab's push hook: a push pipeline at after, with before.
	body = example(t, "gitlab/push.json", map[string]any{"ref": "refs/heads/feature", "before": base, "after": head, "checkout_sha": head})
	resp, out, raw = deliver(t, inst.URL, id, "gitlab", "Push Hook", "5a1e8a7e-0000-4000-8000-000000000003", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if p := getPipeline(t, inst, id, out.PipelineID); p.Source != "push" || p.Ref != "feature" || p.BeforeSha != base || p.Sha != head {
		t.Errorf("push pipeline %+v; want push feature %s..%s", p, base, head)
	}
	// Its tag push hook, of a tag the repository has.
	git(t, r.Work, "tag", "v1.0.0", head)
	git(t, r.Work, "push", "--quiet", r.Bare, "v1.0.0")
	body = example(t, "gitlab/tag_push.json", map[string]any{"after": head, "checkout_sha": head})
	resp, out, raw = deliver(t, inst.URL, id, "gitlab", "Tag Push Hook", "5a1e8a7e-0000-4000-8000-000000000004", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if p := getPipeline(t, inst, id, out.PipelineID); p.Source != "push" || p.Ref != "refs/tags/v1.0.0" || p.Sha != head {
		t.Errorf("tag pipeline %+v; want push of v1.0.0 at %s", p, head)
	}
}

// Gitea's push (its documented example) and pull request, signed its way; the same
// delivery sent to two replicas at once creates one pipeline.
func TestGiteaDeliveryOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	other := inst.Replica(t, jobapitest.Options{})
	r := newRepo(t)
	first := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	second := r.Commit(map[string]string{"src/a.go": "package a\n"})
	id := project(t, inst, r)
	body := example(t, "gitea/push.json", map[string]any{"ref": "refs/heads/main", "before": first, "after": second})

	const tries = 6
	results := make([]api.WebhookResult, tries)
	codes := make([]int, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := inst.URL
			if i%2 == 1 {
				base = other.URL
			}
			resp, out, _ := deliver(t, base, id, "gitea", "push", "f6266f16-1bf3-46a5-9ea4-602e06ead473", body)
			results[i], codes[i] = out, resp.StatusCode
		}()
	}
	wg.Wait()
	created, replayed := 0, 0
	for i, out := range results {
		switch {
		case codes[i] == http.StatusCreated && out.Result == "created":
			created++
		case codes[i] == http.StatusOK && out.Result == "replayed":
			replayed++
		default:
			t.Errorf("delivery %d: %d %+v", i, codes[i], out)
		}
	}
	if created != 1 || replayed != tries-1 || pipelineCount(t, inst, id) != 1 {
		t.Fatalf("%d created, %d replayed, %d pipelines; want 1, %d, 1", created, replayed, pipelineCount(t, inst, id), tries-1)
	}

	// Its pull request for new commits ("synchronized"): a merge request pipeline.
	git(t, r.Work, "checkout", "--quiet", "-b", "feature")
	head := r.Commit(map[string]string{"src/b.go": "package b\n"})
	body = example(t, "gitea/pull_request-synchronized.json", map[string]any{"pull_request.head.sha": head, "pull_request.base.sha": second})
	resp, out, raw := deliver(t, other.URL, id, "gitea", "pull_request", "0b7e0d4a-0000-4000-8000-000000000001", body)
	jobapitest.WantStatus(t, resp, raw, http.StatusCreated)
	if p := getPipeline(t, inst, id, out.PipelineID); p.Source != "merge_request_event" || p.Ref != "feature" || p.Sha != head {
		t.Errorf("pull request pipeline %+v; want merge_request_event feature at %s", p, head)
	}
}
