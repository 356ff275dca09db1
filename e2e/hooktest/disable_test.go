package hooktest_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// TestHookAutoDisabled: a receiver that answers 500 gets 4 failed deliveries in a row, then
// the hook is temporarily disabled (GitLab's auto-disabling) on every replica: no request
// reaches the receiver during the backoff and the event of a pipeline created meanwhile is
// dropped, logged as not sent. A test delivery that succeeds re-enables it.
func TestHookAutoDisabled(t *testing.T) {
	t.Parallel()
	const backoff = 6 * time.Second
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		allowLocal(c)
		c.HooksRetryBackoff = 100 * time.Millisecond
		c.HooksMaxAttempts = 2
		c.HooksDisableBackoff = backoff
	}})
	other := inst.Replica(t, jobapitest.Options{})
	pid := newProject(t, inst)
	var failing atomic.Bool
	failing.Store(true)
	rc := newReceiver(t, func(received, int) (int, string) {
		if failing.Load() {
			return http.StatusInternalServerError, "down"
		}
		return http.StatusOK, "{}"
	})
	hk := createHook(t, inst, pid, map[string]any{"url": rc.URL, "pipeline_events": true, "push_events": false})
	if hk.AlertStatus != "executable" || hk.DisabledUntil != nil {
		t.Fatalf("new hook %+v: want executable, not disabled", hk)
	}
	hookPath := fmt.Sprintf("%s/%d", hooksPath(pid), hk.ID)
	// Two pipelines, two attempts each: 4 failures in a row.
	inst.CreateYAML(t, pid, "", "build:\n  script: make\n")
	other.CreateYAML(t, pid, "", "build:\n  script: make\n")
	rc.waitFor(t, 30*time.Second, "4 failed deliveries", func(got []received) bool { return len(got) >= 4 })

	var got api.ProjectHook
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		inst.MustDo(t, http.StatusOK, "GET", hookPath, nil, &got)
		if got.AlertStatus != "executable" || time.Now().After(deadline) {
			break
		}
	}
	if got.AlertStatus != "temporarily_disabled" || got.DisabledUntil == nil {
		t.Fatalf("hook after 4 failures %+v: want temporarily_disabled with disabled_until", got)
	}
	until, err := time.Parse(time.RFC3339Nano, *got.DisabledUntil)
	if err != nil || time.Until(until) < backoff/2 || time.Until(until) > backoff {
		t.Fatalf("disabled_until %q (%v): want about %v from now", *got.DisabledUntil, err, backoff)
	}
	var seen api.ProjectHook // the state is in Postgres: the other replica shows it too
	other.MustDo(t, http.StatusOK, "GET", hookPath, nil, &seen)
	if seen.AlertStatus != "temporarily_disabled" || seen.DisabledUntil == nil || *seen.DisabledUntil != *got.DisabledUntil {
		t.Errorf("the other replica shows %+v: want %s until %s", seen, got.AlertStatus, *got.DisabledUntil)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, fmt.Sprintf("SELECT recent_failures FROM project_hooks WHERE id = %d", hk.ID)); n != 4 {
		t.Errorf("recent_failures = %d, want 4", n)
	}

	// While disabled: a new event is dropped, the receiver gets nothing.
	sent := len(rc.requests())
	failing.Store(false)
	other.CreateYAML(t, pid, "", "build:\n  script: make\n")
	var log []api.HookEvent
	eventsPath := hookPath + "/events"
	for deadline := time.Now().Add(backoff / 2); ; time.Sleep(100 * time.Millisecond) {
		inst.MustDo(t, http.StatusOK, "GET", eventsPath, nil, &log)
		if len(log) > 0 && strings.HasPrefix(log[0].Error, "not sent") || time.Now().After(deadline) {
			break
		}
	}
	if len(log) == 0 || !strings.HasPrefix(log[0].Error, "not sent: the hook is temporarily disabled") || log[0].State != "failed" {
		t.Fatalf("newest log entry while disabled %+v: want a failed delivery, not sent", log[:min(len(log), 1)])
	}
	if time.Now().After(until) {
		t.Fatalf("the check took past disabled_until: the machine is too slow for this test")
	}
	if n := len(rc.requests()); n != sent {
		t.Errorf("the receiver got %d requests while the hook was disabled", n-sent)
	}

	// A test delivery that succeeds re-enables it at once, on every replica.
	other.MustDo(t, http.StatusCreated, "POST", hookPath+"/test/pipeline_events", nil, nil)
	inst.MustDo(t, http.StatusOK, "GET", hookPath, nil, &got)
	if got.AlertStatus != "executable" || got.DisabledUntil != nil {
		t.Errorf("hook after a successful test %+v: want executable", got)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, fmt.Sprintf("SELECT recent_failures FROM project_hooks WHERE id = %d", hk.ID)); n != 0 {
		t.Errorf("recent_failures after a successful test = %d, want 0", n)
	}
	p := inst.CreateYAML(t, pid, "", "build:\n  script: make\n")
	rc.waitFor(t, 30*time.Second, "the event of a pipeline after the hook is re-enabled", func(got []received) bool {
		return pipelineStatuses(t, got, p.ID)["pending"] == 1
	})
}
