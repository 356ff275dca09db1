package hooktest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

const hookToken = "hook-token-3b8f0c2e9d"

func createHook(t *testing.T, inst *jobapitest.Instance, pid int64, fields map[string]any) api.ProjectHook {
	t.Helper()
	var hk api.ProjectHook
	inst.MustDo(t, http.StatusCreated, "POST", hooksPath(pid), fields, &hk)
	return hk
}

// parsed reads a delivery with GitLab's own Go client, as a receiver written against GitLab would.
func parsed(t *testing.T, r received) any {
	t.Helper()
	req, _ := http.NewRequest(r.Method, "http://receiver"+r.Path, bytes.NewReader(r.Body))
	req.Header = r.Header
	ev, err := gitlab.ParseWebhook(gitlab.HookEventType(req), r.Body)
	if err != nil {
		t.Fatalf("client-go cannot read the %s delivery: %v\n%s", r.Header.Get("X-Gitlab-Event"), err, r.Body)
	}
	return ev
}

func pipelineStatuses(t *testing.T, got []received, pipelineID int64) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range got {
		if r.Header.Get("X-Gitlab-Event") != "Pipeline Hook" {
			continue
		}
		ev := parsed(t, r).(*gitlab.PipelineEvent)
		if ev.ObjectAttributes.ID == pipelineID {
			out[ev.ObjectAttributes.Status]++
		}
	}
	return out
}

// isAdmin says whether a hook's user is the admin token's holder, with its email
// redacted as GitLab's hooks have it.
func isAdmin(u *gitlab.EventUser) bool {
	return u != nil && u.ID == 1 && u.Username == "admin" && u.Name == "Administrator" && u.Email == "[REDACTED]"
}

// runPipeline creates a one-job pipeline at sha and has a runner finish it with state.
func runPipeline(t *testing.T, inst *jobapitest.Instance, pid int64, sha, state string) api.Pipeline {
	t.Helper()
	p := inst.CreateYAML(t, pid, sha, "build:\n  script: make\n")
	r := inst.NewRunner(t)
	job := r.Take(t)
	r.Finish(t, job, state, map[string]string{runnerclient.StateFailed: "script_failure"}[state])
	return p
}

// TestPipelineAndJobHooks sends a pipeline's and its job's events to a real receiver with
// GitLab's headers and token, in payloads GitLab's Go client reads, each state once; the
// delivery log shows them and never the token.
func TestPipelineAndJobHooks(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: allowLocal})
	pid := newProject(t, inst)
	rc := newReceiver(t, nil)
	hk := createHook(t, inst, pid, map[string]any{"url": rc.URL + "/gitlab", "token": hookToken,
		"pipeline_events": true, "job_events": true, "push_events": true})
	sha := strings.Repeat("ab", 20)
	p := runPipeline(t, inst, pid, sha, runnerclient.StateSuccess)
	got := rc.waitFor(t, 20*time.Second, "the pipeline's success and the job's", func(got []received) bool {
		jobDone := false
		for _, r := range got {
			if ev, ok := parsed(t, r).(*gitlab.JobEvent); ok && ev.BuildStatus == "success" {
				jobDone = true
			}
		}
		return jobDone && pipelineStatuses(t, got, p.ID)["success"] == 1
	})
	uuids := map[string]bool{}
	for _, r := range got {
		h := r.Header
		if r.Method != "POST" || r.Path != "/gitlab" || h.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s %s: want a JSON POST to /gitlab", r.Method, r.Path, h.Get("Content-Type"))
		}
		if h.Get("X-Gitlab-Token") != hookToken || h.Get("X-Gitlab-Webhook-UUID") == "" || h.Get("X-Gitlab-Instance") != inst.URL {
			t.Errorf("headers %v: want the token, the hook's UUID and the instance %s", h, inst.URL)
		}
		id := h.Get("X-Gitlab-Event-UUID")
		if id == "" || uuids[id] || h.Get("Idempotency-Key") != id {
			t.Errorf("X-Gitlab-Event-UUID %q: want one per delivery, also as Idempotency-Key", id)
		}
		uuids[id] = true
		switch ev := parsed(t, r).(type) {
		case *gitlab.PipelineEvent:
			a := ev.ObjectAttributes
			if ev.ObjectKind != "pipeline" || a.ID != p.ID || a.Ref != "main" || a.SHA != sha || ev.Project.ID != pid ||
				a.URL != fmt.Sprintf("%s/projects/%d/pipelines/%d", inst.URL, pid, p.ID) || len(ev.Builds) != 1 || ev.Builds[0].Name != "build" {
				t.Errorf("pipeline event %+v: want pipeline %d on main at %s with its build", ev, p.ID, sha)
			}
			if a.Status == "success" && (a.FinishedAt == "" || ev.Builds[0].Status != "success") {
				t.Errorf("success event %s: want finished_at and the build's success", r.Body)
			}
			// The admin token created the pipeline: GitLab's user 1, as GET /user names it.
			if !isAdmin(ev.User) || len(ev.Builds) != 1 || !isAdmin(ev.Builds[0].User) {
				t.Errorf("pipeline event's user %+v and its build's: want the administrator who created it: %s", ev.User, r.Body)
			}
		case *gitlab.JobEvent:
			if ev.ObjectKind != "build" || ev.BuildName != "build" || ev.PipelineID != p.ID || ev.SHA != sha || ev.ProjectID != pid {
				t.Errorf("job event %+v: want job build of pipeline %d", ev, p.ID)
			}
			if !isAdmin(ev.User) {
				t.Errorf("job event's user %+v: want the administrator who created the pipeline", ev.User)
			}
		default:
			t.Errorf("unexpected event %T: %s", ev, r.Body)
		}
	}
	// Nothing sent twice: the passes of the next seconds find the same events.
	time.Sleep(3 * time.Second)
	seen := map[string]int{}
	for _, r := range rc.requests() {
		var obj struct {
			Kind   string `json:"object_kind"`
			Status string `json:"build_status"`
			Attrs  struct {
				Status string `json:"status"`
			} `json:"object_attributes"`
		}
		_ = json.Unmarshal(r.Body, &obj)
		seen[obj.Kind+":"+obj.Status+obj.Attrs.Status]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s sent %d times, want once (all: %v)", k, n, seen)
		}
	}
	var log []api.HookEvent
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/%d/events?per_page=100", hooksPath(pid), hk.ID), nil, &log)
		if len(log) >= len(rc.requests()) || time.Now().After(deadline) {
			break
		}
	}
	if len(log) != len(rc.requests()) {
		t.Errorf("log has %d attempts, the receiver got %d requests", len(log), len(rc.requests()))
	}
	for _, e := range log {
		if e.ResponseStatus != "200" || e.State != "delivered" || e.Attempt != 1 || e.URL != rc.URL+"/gitlab" || len(e.RequestData) == 0 {
			t.Errorf("log entry %+v: want a delivered first attempt answered 200 with its payload", e)
		}
	}
	_, raw := inst.Do(t, "GET", fmt.Sprintf("%s/%d/events", hooksPath(pid), hk.ID), nil)
	if strings.Contains(string(raw), hookToken) {
		t.Errorf("the delivery log shows the token: %s", raw)
	}
	// No push event: the pipeline came from the API, not a push.
	for _, r := range rc.requests() {
		if strings.Contains(r.Header.Get("X-Gitlab-Event"), "Push") {
			t.Errorf("a push event for an API pipeline: %s", r.Body)
		}
	}
}

// TestRetriesWithBackoffAndLog: a receiver that fails twice before it answers gets each
// delivery three times, the log shows the three attempts; one that always fails is given
// up after the limit.
func TestRetriesWithBackoffAndLog(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		allowLocal(c)
		c.HooksRetryBackoff = 200 * time.Millisecond
		c.HooksMaxAttempts = 3
	}})
	pid := newProject(t, inst)
	var mu sync.Mutex
	tries := map[string]int{}
	flaky := newReceiver(t, func(r received, _ int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get("X-Gitlab-Event-UUID")
		tries[id]++
		if tries[id] <= 2 {
			return http.StatusInternalServerError, `{"error":"not yet"}`
		}
		return http.StatusOK, `{"ok":true}`
	})
	broken := newReceiver(t, func(received, int) (int, string) { return http.StatusBadGateway, "down" })
	hk := createHook(t, inst, pid, map[string]any{"url": flaky.URL, "pipeline_events": true, "push_events": false})
	dead := createHook(t, inst, pid, map[string]any{"url": broken.URL, "pipeline_events": true, "push_events": false})
	p := inst.CreateYAML(t, pid, "", "build:\n  script: make\n")
	flaky.waitFor(t, 30*time.Second, "the third attempt of the pending event", func(got []received) bool {
		return pipelineStatuses(t, got, p.ID)["pending"] == 3
	})
	eventsPath := fmt.Sprintf("%s/%d/events", hooksPath(pid), hk.ID)
	var log []api.HookEvent
	deadline := time.Now().Add(10 * time.Second)
	for {
		inst.MustDo(t, http.StatusOK, "GET", eventsPath, nil, &log)
		if len(log) == 3 && log[0].State == "delivered" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(log) != 3 {
		t.Fatalf("log %+v: want the three attempts of one delivery", log)
	}
	for i, e := range log { // newest first
		var sent struct {
			Attrs struct {
				ID int64 `json:"id"`
			} `json:"object_attributes"`
		}
		_ = json.Unmarshal(e.RequestData, &sent)
		wantStatus, wantErr := "500", true
		if i == 0 {
			wantStatus, wantErr = "200", false
		}
		if e.ID != log[0].ID || e.Attempt != 3-i || e.ResponseStatus != wantStatus || (e.Error != "") != wantErr ||
			e.State != "delivered" || sent.Attrs.ID != p.ID {
			t.Errorf("log entry %d %+v: want attempt %d answered %s of delivery %d, now delivered", i, e, 3-i, wantStatus, log[0].ID)
		}
	}
	if !(log[0].StartedAt.Sub(log[1].StartedAt) >= 350*time.Millisecond && log[1].StartedAt.Sub(log[2].StartedAt) >= 150*time.Millisecond) {
		t.Errorf("attempts at %v, %v, %v: want the waits to double from 200ms", log[2].StartedAt, log[1].StartedAt, log[0].StartedAt)
	}
	deadPath := fmt.Sprintf("%s/%d/events", hooksPath(pid), dead.ID)
	deadline = time.Now().Add(15 * time.Second)
	for {
		inst.MustDo(t, http.StatusOK, "GET", deadPath, nil, &log)
		if len(log) >= 3 && log[0].State == "failed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(log) != 3 || log[0].State != "failed" || log[0].ResponseStatus != "502" || log[0].ResponseBody != "down" {
		t.Fatalf("log of the broken receiver %+v: want 3 attempts answered 502, given up", log)
	}
	time.Sleep(time.Second)
	if n := len(broken.requests()); n != 3 {
		t.Errorf("the broken receiver got %d requests, want 3 (then given up)", n)
	}
}

// TestTwoReplicasSendEachOnce: two replicas both find every event and both send; each
// delivery reaches the receiver once.
func TestTwoReplicasSendEachOnce(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: allowLocal})
	other := inst.Replica(t, jobapitest.Options{})
	pid := newProject(t, inst)
	rc := newReceiver(t, func(received, int) (int, string) {
		time.Sleep(20 * time.Millisecond) // keeps sends in flight while the other replica claims
		return http.StatusOK, "{}"
	})
	createHook(t, inst, pid, map[string]any{"url": rc.URL, "pipeline_events": true, "job_events": true})
	const pipelines = 5
	var ids []int64
	for i := range pipelines {
		replica := inst
		if i%2 == 1 {
			replica = other
		}
		ids = append(ids, runPipeline(t, replica, pid, "", runnerclient.StateSuccess).ID)
	}
	rc.waitFor(t, 30*time.Second, "every pipeline's success", func(got []received) bool {
		for _, id := range ids {
			if pipelineStatuses(t, got, id)["success"] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * time.Second) // more passes on both replicas
	got := rc.requests()
	perUUID := map[string]int{}
	for _, r := range got {
		perUUID[r.Header.Get("X-Gitlab-Event-UUID")]++
	}
	for id, n := range perUUID {
		if n != 1 {
			t.Errorf("delivery %s received %d times", id, n)
		}
	}
	for _, id := range ids {
		for status, n := range pipelineStatuses(t, got, id) {
			if n != 1 {
				t.Errorf("pipeline %d %s sent %d times", id, status, n)
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM hook_deliveries WHERE state <> 'delivered'")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries not delivered", n)
		}
	}
	if n, rows := len(got), jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM hook_delivery_attempts"); n != rows {
		t.Errorf("the receiver got %d requests, the log has %d attempts", n, rows)
	}
}
