package hooktest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

const pushSecret = "push-secret-0123456789abcdef"

// gitlabPush is GitLab's documented push payload (builds/pushes/testdata) for ref at after.
func gitlabPush(t *testing.T, ref, before, after string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(jobapitest.ModuleRoot(t), "builds", "pushes", "testdata", "gitlab", "push.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["ref"], doc["before"], doc["after"], doc["checkout_sha"] = ref, before, after, after
	out, _ := json.Marshal(doc)
	return out
}

// TestPushHooks: a push that jobapi learns of (a forge's webhook here) reaches the hooks
// with push events whose branch filter takes the branch, as GitLab's Push Hook; a hook
// filtering on other branches gets nothing. The test endpoint sends one at once.
func TestPushHooks(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: allowLocal})
	repo := jobapitest.NewGitRepo(t)
	base := repo.Commit(map[string]string{".gitlab-ci.yml": "build:\n  script: make\n"})
	head := repo.Commit(map[string]string{"README": "hello\n"})
	var prj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "pushed", "repo_url": "file://" + repo.Bare}, &prj)
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", prj.ID), map[string]any{"webhook_secret": pushSecret}, nil)
	rc := newReceiver(t, nil)
	other := newReceiver(t, nil)
	hk := createHook(t, inst, prj.ID, map[string]any{"url": rc.URL, "push_events_branch_filter": "ma*", "token": hookToken})
	createHook(t, inst, prj.ID, map[string]any{"url": other.URL, "push_events_branch_filter": "release/*"})

	resp, body := jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/hooks/inbound/gitlab", prj.ID),
		gitlabPush(t, "refs/heads/main", base, head), "X-Gitlab-Event", "Push Hook", "X-Gitlab-Token", pushSecret,
		"X-Gitlab-Event-UUID", "0b3c1f3e-push-1")
	jobapitest.WantStatus(t, resp, body, http.StatusCreated)
	got := rc.waitFor(t, 20*time.Second, "the Push Hook", func(got []received) bool { return len(got) > 0 })
	r := got[0]
	if r.Header.Get("X-Gitlab-Event") != "Push Hook" || r.Header.Get("X-Gitlab-Token") != hookToken {
		t.Fatalf("headers %v: want a Push Hook with the token", r.Header)
	}
	ev, ok := parsed(t, r).(*gitlab.PushEvent)
	if !ok || ev.ObjectKind != "push" || ev.Ref != "refs/heads/main" || ev.Before != base || ev.After != head ||
		ev.CheckoutSHA != head || ev.ProjectID != prj.ID || ev.TotalCommitsCount != 1 || ev.Commits[0].ID != head ||
		ev.Project.PathWithNamespace != "jobapi/pushed" {
		t.Fatalf("push event %+v: want main from %s to %s", ev, base, head)
	}
	time.Sleep(2 * time.Second)
	if n := len(rc.requests()); n != 1 {
		t.Errorf("%d push deliveries, want 1", n)
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("the hook filtering release/* got %d deliveries, want none", n)
	}

	// The test endpoint: GitLab's POST …/hooks/:id/test/:trigger, sent at once, logged.
	one := fmt.Sprintf("%s/%d", hooksPath(prj.ID), hk.ID)
	var answer api.Error
	inst.MustDo(t, http.StatusCreated, "POST", one+"/test/pipeline_events", nil, &answer)
	if answer.Message != "201 Created" {
		t.Errorf("test answer %+v", answer)
	}
	got = rc.requests()
	if last := got[len(got)-1]; last.Header.Get("X-Gitlab-Event") != "Pipeline Hook" {
		t.Errorf("the test delivery is %s, want a Pipeline Hook", last.Header.Get("X-Gitlab-Event"))
	} else if pe, ok := parsed(t, last).(*gitlab.PipelineEvent); !ok || pe.ObjectAttributes.SHA != head {
		t.Errorf("test pipeline event %+v: want the newest pipeline's", pe)
	}
	inst.MustDo(t, http.StatusCreated, "POST", one+"/test/job_events", nil, nil)
	resp, body = inst.Do(t, "POST", one+"/test/issues_events", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)
	missing := newReceiver(t, func(received, int) (int, string) { return http.StatusNotFound, "no such receiver" })
	failing := createHook(t, inst, prj.ID, map[string]any{"url": missing.URL + "/nowhere", "push_events": true})
	resp, body = inst.Do(t, "POST", fmt.Sprintf("%s/%d/test/push_events", hooksPath(prj.ID), failing.ID), nil)
	if msg := jobapitest.WantJSONError(t, resp, body, http.StatusUnprocessableEntity); !strings.Contains(msg, "404") {
		t.Errorf("failed test: %q, want the receiver's 404 named", msg)
	}
	var log []api.HookEvent
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/%d/events", hooksPath(prj.ID), failing.ID), nil, &log)
	if len(log) != 1 || log[0].State != "failed" || log[0].ResponseStatus != "404" || log[0].Trigger != "push_hooks" {
		t.Errorf("log of the failed test %+v: want one attempt, given up (no retries for tests)", log)
	}
}
