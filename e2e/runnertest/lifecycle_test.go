package runnertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// wire records each request a runnerclient sends and the status it got, as "METHOD path
// status": what a gitlab-runner command put on the wire.
type wire struct {
	mu    sync.Mutex
	calls []string
	next  http.RoundTripper
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(r)
	call := r.Method + " " + r.URL.Path
	if err == nil {
		call += fmt.Sprintf(" %d", resp.StatusCode)
	}
	w.mu.Lock()
	w.calls = append(w.calls, call)
	w.mu.Unlock()
	return resp, err
}

// take returns the calls recorded since the last take.
func (w *wire) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.calls
	w.calls = nil
	return out
}

// recorded is a runner (runnerclient, gitlab-runner's calls) whose requests w records.
func recorded(t *testing.T, base, token, systemID string) (*runnerclient.Client, *wire) {
	c := runnerclient.New(base, token, systemID)
	w := &wire{next: c.HTTP.Transport}
	c.HTTP.Transport = w
	t.Cleanup(c.CloseIdleConnections)
	return c, w
}

func wantCalls(t *testing.T, w *wire, what string, want ...string) {
	t.Helper()
	if got := w.take(); !slices.Equal(got, want) {
		t.Errorf("%s sent %q, want %q", what, got, want)
	}
}

func wantStatusErr(t *testing.T, err error, code int, what string) {
	t.Helper()
	var se *runnerclient.StatusError
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("%s: %v, want %d", what, err, code)
	}
}

func wantExpiry(t *testing.T, what string, got time.Time, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s: token_expires_at %v, want %v", what, got, want)
	}
}

// Each gitlab-runner command, as runnerclient mirrors its code paths (commands/register.go,
// unregister.go, reset_token.go, multi.go at v17.9), against a replica whose runner tokens
// expire after 2 hours with a 10-minute rotation grace: the requests it sends and jobapi's
// answers. docs/runners.md's runner-commands table is this test.
func TestRunnerCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Second)
	clk := jobapitest.NewClock(start)
	const lifetime, grace = 2 * time.Hour, 10 * time.Minute
	inst := jobapitest.Start(t, jobapitest.Options{Now: clk.Now, Configure: func(c *server.Config) {
		c.RunnerRegistrationToken = "reg-secret-token"
		c.RunnerTokenExpiresIn, c.RunnerTokenRotationGrace = lifetime, grace
	}})

	// register --registration-token: POST /runners; the runner gets a glrtr- token.
	reg, regWire := recorded(t, inst.URL, "", "s_registered")
	wantStatusErr(t, reg.RegisterCommand(ctx, "wrong-token", runnerclient.RegisterParameters{}), http.StatusForbidden,
		"register with a wrong registration token")
	wantCalls(t, regWire, "register with a wrong registration token", "POST /api/v4/runners 403")
	if err := reg.RegisterCommand(ctx, "reg-secret-token", runnerclient.RegisterParameters{
		Description: "registered", Tags: "docker,linux", RunUntagged: false}); err != nil {
		t.Fatalf("register --registration-token: %v", err)
	}
	wantCalls(t, regWire, "register --registration-token", "POST /api/v4/runners 201")
	if reg.ID == 0 || !strings.HasPrefix(reg.Token, "glrtr-") || runnerclient.TokenIsCreatedRunnerToken(reg.Token) {
		t.Fatalf("registered runner: id %d token %.8s…, want an id and a glrtr- token", reg.ID, reg.Token)
	}
	wantExpiry(t, "register --registration-token", reg.TokenExpiresAt, start.Add(lifetime))
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", reg.ID), nil, &rn)
	if rn.Description != "registered" || !slices.Equal(rn.TagList, []string{"docker", "linux"}) || rn.RunUntagged {
		t.Errorf("registered runner %+v", rn)
	}

	// register --token glrt-…: an operator created the runner; register only verifies it.
	var created api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners", map[string]any{"description": "created"}, &created)
	if created.TokenExpiresAt == nil || *created.TokenExpiresAt != start.Add(lifetime).Format(time.RFC3339) {
		t.Errorf("POST /user/runners token_expires_at %v, want %s", created.TokenExpiresAt, start.Add(lifetime).Format(time.RFC3339))
	}
	glrt, glrtWire := recorded(t, inst.URL, "", "s_created_a")
	if err := glrt.RegisterCommand(ctx, created.Token, runnerclient.RegisterParameters{}); err != nil {
		t.Fatalf("register --token: %v", err)
	}
	wantCalls(t, glrtWire, "register --token", "POST /api/v4/runners/verify 200")
	if glrt.ID != created.ID || glrt.Token != created.Token {
		t.Errorf("register --token: id %d, want %d", glrt.ID, created.ID)
	}
	wantExpiry(t, "register --token", glrt.TokenExpiresAt, start.Add(lifetime))

	// verify: 200 with the expiry; an unknown token 403.
	if res, err := reg.Verify(ctx); err != nil || res.ID != reg.ID {
		t.Fatalf("verify: %+v %v", res, err)
	} else {
		wantExpiry(t, "verify", res.TokenExpiresAt, start.Add(lifetime))
	}
	wantCalls(t, regWire, "verify", "POST /api/v4/runners/verify 200")
	unknown, unknownWire := recorded(t, inst.URL, "glrt-unknown-token-0123456789", "s_unknown")
	_, err := unknown.Verify(ctx)
	wantStatusErr(t, err, http.StatusForbidden, "verify an unknown token")
	wantCalls(t, unknownWire, "verify an unknown token", "POST /api/v4/runners/verify 403")

	// run: the runner resets its token itself at 75 % of its lifetime; the old token works
	// for the grace, the new one from then on.
	at, ok := glrt.NextTokenReset()
	if want := glrt.TokenObtainedAt.Add(glrt.TokenExpiresAt.Sub(glrt.TokenObtainedAt) * 3 / 4); !ok || !at.Equal(want) || !at.After(start) {
		t.Fatalf("next reset %v (%v), want %v: 75 %% of the way from obtained to expiry", at, ok, want)
	}
	clk.Set(at)
	old := glrt.Token
	reset, err := glrt.ResetToken(ctx)
	if err != nil || reset.Token == old || !runnerclient.TokenIsCreatedRunnerToken(reset.Token) || glrt.Token != reset.Token {
		t.Fatalf("rotation: %v, a new glrt- token", err)
	}
	wantExpiry(t, "rotation", reset.TokenExpiresAt, at.Add(lifetime).Truncate(time.Second))
	wantCalls(t, glrtWire, "rotation", "POST /api/v4/runners/reset_authentication_token 201")
	before, beforeWire := recorded(t, inst.URL, old, "s_created_a")
	if _, res, err := before.RequestJob(ctx); err != nil || res.Code != http.StatusNoContent {
		t.Fatalf("job request with the old token in its grace: %d %v, want 204", res.Code, err)
	}
	clk.Add(grace)
	_, res, _ := before.RequestJob(ctx)
	if res.Code != http.StatusForbidden || res.Healthy {
		t.Fatalf("job request with the old token after the grace: %d (healthy %v), want 403 (unhealthy)", res.Code, res.Healthy)
	}
	wantCalls(t, beforeWire, "old token in and after its grace", "POST /api/v4/jobs/request 204", "POST /api/v4/jobs/request 403")
	if _, res, err := glrt.RequestJob(ctx); err != nil || res.Code != http.StatusNoContent {
		t.Fatalf("job request with the new token: %d %v, want 204", res.Code, err)
	}
	wantCalls(t, glrtWire, "run with the new token", "POST /api/v4/jobs/request 204")

	// run with a token past its expiry (the runner was stopped through its rotation): its
	// reset is due at once and refused, and so is everything else; the token is dead.
	clk.Set(reg.TokenExpiresAt)
	if at, ok := reg.NextTokenReset(); !ok || !at.Before(clk.Now()) {
		t.Fatalf("next reset of the expired token %v, want one in the past", at)
	}
	_, err = reg.ResetToken(ctx)
	wantStatusErr(t, err, http.StatusForbidden, "reset with an expired token")
	_, res, _ = reg.RequestJob(ctx)
	if res.Code != http.StatusForbidden || res.Healthy {
		t.Errorf("job request with an expired token: %d, want 403", res.Code)
	}
	_, err = reg.Verify(ctx)
	wantStatusErr(t, err, http.StatusForbidden, "verify with an expired token")
	wantCalls(t, regWire, "run with an expired token", "POST /api/v4/runners/reset_authentication_token 403",
		"POST /api/v4/jobs/request 403", "POST /api/v4/runners/verify 403")

	// reset-token --pat: the operator's reset revives it, and revokes every earlier token at once.
	expired := reg.Token
	if _, err := reg.ResetTokenWithPAT(ctx, reg.ID, jobapitest.AdminToken); err != nil || !strings.HasPrefix(reg.Token, "glrtr-") {
		t.Fatalf("reset-token --pat: %v, a new glrtr- token", err)
	}
	wantExpiry(t, "reset-token --pat", reg.TokenExpiresAt, clk.Now().Add(lifetime))
	wantCalls(t, regWire, "reset-token --pat", fmt.Sprintf("POST /api/v4/runners/%d/reset_authentication_token 201", reg.ID))
	if _, res, _ := reg.RequestJob(ctx); res.Code != http.StatusNoContent {
		t.Errorf("job request after reset-token --pat: %d, want 204", res.Code)
	}
	old = reg.Token
	if _, err := reg.ResetToken(ctx); err != nil {
		t.Fatalf("reset-token: %v", err)
	}
	if _, err := reg.ResetTokenWithPAT(ctx, reg.ID, jobapitest.AdminToken); err != nil {
		t.Fatalf("reset-token --pat: %v", err)
	}
	for _, tok := range []string{expired, old} {
		_, err = runnerclient.New(inst.URL, tok, "s_registered").Verify(ctx)
		wantStatusErr(t, err, http.StatusForbidden, "verify with a token an operator's reset revoked")
	}
	wantCalls(t, regWire, "reset-token, then --pat", "POST /api/v4/jobs/request 204",
		"POST /api/v4/runners/reset_authentication_token 201", fmt.Sprintf("POST /api/v4/runners/%d/reset_authentication_token 201", reg.ID))

	// unregister of the glrt- runner: DELETE /runners/managers; the runner and its other
	// machines stay.
	other, _ := recorded(t, inst.URL, glrt.Token, "s_created_b")
	if _, err := other.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if err := glrt.UnregisterCommand(ctx); err != nil {
		t.Fatalf("unregister (glrt-): %v", err)
	}
	wantStatusErr(t, glrt.UnregisterCommand(ctx), http.StatusNotFound, "unregister the same manager again")
	wantCalls(t, glrtWire, "unregister (glrt-)", "DELETE /api/v4/runners/managers 204", "DELETE /api/v4/runners/managers 404")
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", created.ID), nil, &rn)
	if len(rn.Managers) != 1 || rn.Managers[0].SystemID != "s_created_b" {
		t.Errorf("managers after unregistering s_created_a: %+v", rn.Managers)
	}
	if _, err := other.Verify(ctx); err != nil {
		t.Errorf("the runner's other machine after unregister: %v", err)
	}

	// unregister of the glrtr- runner: DELETE /runners; it is gone, as GitLab deletes a
	// runner registered with a registration token.
	if err := reg.UnregisterCommand(ctx); err != nil {
		t.Fatalf("unregister (glrtr-): %v", err)
	}
	wantStatusErr(t, reg.UnregisterCommand(ctx), http.StatusForbidden, "unregister again")
	wantCalls(t, regWire, "unregister (glrtr-)", "DELETE /api/v4/runners 204", "DELETE /api/v4/runners 403")
	resp, body := inst.Do(t, "GET", fmt.Sprintf("/api/v4/runners/%d", reg.ID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusNotFound)

	// Every change is audited, and no answer but the issuing one shows a token.
	resp, body = inst.Do(t, "GET", "/api/v4/admin/events?per_page=100", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	var actions []string
	for _, e := range jobapitest.Decode[[]map[string]any](t, body) {
		actions = append(actions, fmt.Sprint(e["action"]))
	}
	for _, want := range []string{"runner_created", "runner_manager_deleted", "runner_token_reset", "runner_deleted"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit log %v has no %s", actions, want)
		}
	}
	if strings.Contains(string(body), "glrt") {
		t.Error("the audit log shows a runner token")
	}
}

// Without JOBAPI_RUNNER_TOKEN_EXPIRES_IN tokens never expire: every answer says
// token_expires_at null, so gitlab-runner never rotates, and a reset without a grace
// stops the old token at once.
func TestRunnerTokensWithoutExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.RunnerRegistrationToken = "reg-secret-token"
		c.RunnerTokenRotationGrace = 0
	}})
	resp, body := inst.Do(t, "POST", "/api/v4/runners", map[string]any{"token": "reg-secret-token"})
	jobapitest.WantStatus(t, resp, body, http.StatusCreated)
	if got := jobapitest.Decode[map[string]any](t, body); got["token_expires_at"] != nil || !strings.HasPrefix(fmt.Sprint(got["token"]), "glrtr-") {
		t.Errorf("POST /runners: %s, want a glrtr- token and token_expires_at null", body)
	}
	_, token := inst.CreateRunner(t)
	c := runnerclient.New(inst.URL, "", "s_noexpiry")
	if err := c.RegisterCommand(ctx, token, runnerclient.RegisterParameters{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.NextTokenReset(); ok || !c.TokenExpiresAt.IsZero() {
		t.Errorf("a token without expiry is scheduled for a reset (expires %v)", c.TokenExpiresAt)
	}
	resp, body = inst.Do(t, "POST", "/api/v4/runners/verify", map[string]any{"token": token, "system_id": "s_raw"})
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	if got := jobapitest.Decode[map[string]any](t, body); got["token_expires_at"] != nil {
		t.Errorf("verify: %s, want token_expires_at null", body)
	}
	if _, err := c.ResetToken(ctx); err != nil || !c.TokenExpiresAt.IsZero() {
		t.Fatalf("reset-token: %v, expires %v", err, c.TokenExpiresAt)
	}
	_, err := runnerclient.New(inst.URL, token, "s_noexpiry").Verify(ctx)
	wantStatusErr(t, err, http.StatusForbidden, "verify with the token before a reset without grace")
}

// An operator deletes a runner while its machines hold jobs. In the same transaction a
// waiting build fails and is retried (a provisioning failure, as a decline), a running one
// fails with runner_system_failure and is retried only when its retry rule asks for it, a
// canceling one ends canceled, and their pipelines advance; pending builds stay. The
// runner process is told to stop at its next call.
func TestDeleteRunnerWithJobsInFlight(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	inst.EnableTwoPhase(t, 1)
	job := func(name string, retry map[string]any) jobapitest.Job {
		j := jobapitest.Job{"name": name, "stage": "test", "script": "true"}
		if retry != nil {
			j["retry"] = retry
		}
		return j
	}
	waiting := inst.CreatePipeline(t, 1, []string{"test"}, job("waiting", nil))
	retried := inst.CreatePipeline(t, 2, []string{"test", "deploy"}, job("retried", map[string]any{"max": 1, "when": []string{"runner_system_failure"}}),
		jobapitest.Job{"name": "later", "stage": "deploy", "script": "true"})
	running := inst.CreatePipeline(t, 3, []string{"test", "deploy"}, job("running", nil),
		jobapitest.Job{"name": "after", "stage": "deploy", "script": "true"})
	canceling := inst.CreatePipeline(t, 4, []string{"test"}, job("canceling", nil))
	pending := inst.CreatePipeline(t, 5, []string{"test"}, job("pending", nil))

	id, token := inst.CreateRunner(t)
	r := jobapitest.NewRunner(t, inst.URL, token, "s_doomed")
	r.Info.Features.TwoPhaseJobCommit = true
	held := r.TakeAll(t, 4)
	for _, name := range []string{"retried", "running", "canceling"} {
		jobapitest.WantUpdate(t, "ack "+name, r.Put(t, held[name], runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "running")
	}
	if res := r.Patch(t, held["running"], 0, "step 1\n"); res.State != runnerclient.PatchSucceeded {
		t.Fatalf("trace before the delete: %v", res.State)
	}
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/4/jobs/%d/cancel", held["canceling"].ID), nil, nil)
	if got := inst.Job(t, 1, held["waiting"].ID); got.Status != "waiting_for_runner_ack" {
		t.Fatalf("job waiting is %s before the delete", got.Status)
	}

	resp, body := inst.Do(t, "DELETE", fmt.Sprintf("/api/v4/runners/%d", id), nil)
	jobapitest.WantStatus(t, resp, body, http.StatusNoContent)

	for _, tc := range []struct {
		project int64
		name    string
		status  string
		reason  string
		retried bool
	}{
		{1, "waiting", "failed", "runner_system_failure", true},
		{2, "retried", "failed", "runner_system_failure", true},
		{3, "running", "failed", "runner_system_failure", false},
		{4, "canceling", "canceled", "", false},
	} {
		got := inst.Job(t, tc.project, held[tc.name].ID)
		if got.Status != tc.status || jobapitest.Reason(got) != tc.reason || (got.RetriedBy != nil) != tc.retried {
			t.Errorf("job %s: %s %q retried_by %v, want %s %q retried %v", tc.name, got.Status, jobapitest.Reason(got),
				got.RetriedBy, tc.status, tc.reason, tc.retried)
		}
		ev := inst.Events(t, tc.project, got.ID)
		if del := jobapitest.EventsOf(ev, "runner_deleted"); len(del) != 1 || del[0].RunnerManager != "s_doomed" ||
			del[0].Detail["runner_id"] != float64(id) {
			t.Errorf("job %s: events %s, want one runner_deleted by s_doomed", tc.name, jobapitest.EventTypes(ev))
		}
	}
	// Pipelines advanced in the same transaction.
	for _, tc := range []struct {
		p    api.Pipeline
		want string
	}{{waiting, "pending"}, {retried, "pending"}, {running, "failed"}, {canceling, "canceled"}, {pending, "pending"}} {
		got := inst.Pipeline(t, tc.p)
		if got.Status != tc.want {
			t.Errorf("pipeline of project %d: %s, want %s", tc.p.ProjectID, got.Status, tc.want)
		}
		if tc.p.ProjectID == 3 && jobapitest.JobStatuses(got)["after"] != "skipped" {
			t.Errorf("the stage after the failed job: %v, want skipped", jobapitest.JobStatuses(got))
		}
	}

	// The runner process learns it at its next call and aborts each job.
	jobapitest.WantUpdate(t, "ack of the waiting job", r.Put(t, held["waiting"], runnerclient.StateRunning, runnerclient.UpdateOptions{}),
		http.StatusForbidden, "failed")
	jobapitest.WantUpdate(t, "keep-alive of the running job", r.Put(t, held["running"], runnerclient.StateRunning, runnerclient.UpdateOptions{}),
		http.StatusForbidden, "failed")
	if res := r.Patch(t, held["running"], len("step 1\n"), "step 2\n"); res.State != runnerclient.PatchAbort {
		t.Errorf("trace after the delete: %v, want abort", res.State)
	}
	_, res, _ := r.RequestJob(context.Background())
	if res.Code != http.StatusForbidden {
		t.Errorf("job request of the deleted runner: %d, want 403", res.Code)
	}

	// Another runner takes what is left: the pending job and the two retries.
	other := inst.NewRunner(t)
	left := other.TakeAll(t, 3)
	for _, name := range []string{"waiting", "retried", "pending"} {
		if left[name] == nil {
			t.Errorf("another runner did not get %s: %v", name, slices.Collect(maps.Keys(left)))
		}
	}
	other.NoJob(t)

	resp, body = inst.Do(t, "GET", "/api/v4/admin/events?per_page=100", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	found := false
	for _, e := range jobapitest.Decode[[]map[string]any](t, body) {
		if e["action"] == "runner_deleted" {
			detail, _ := e["detail"].(map[string]any)
			ended, _ := detail["ended_builds"].([]any)
			found = len(ended) == 4
		}
	}
	if !found {
		t.Errorf("no runner_deleted audit event naming the 4 ended builds: %s", body)
	}
}
