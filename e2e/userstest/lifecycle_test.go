package userstest_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/tokenguard"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// TestRevokedTokenFailsOnEveryReplicaAtOnce: two replicas on one database; a token works on
// both, is revoked through one, and the very next request on either is a 401 with GitLab's
// invalid_token (no cache to wait out: each request looks the digest up).
func TestRevokedTokenFailsOnEveryReplicaAtOnce(t *testing.T) {
	t.Parallel()
	a := jobapitest.Start(t, jobapitest.Options{})
	b := a.Replica(t, jobapitest.Options{})
	alice := createUser(t, a, "alice", false)
	tok := createToken(t, a, alice.ID, map[string]any{"name": "laptop", "scopes": []string{"api"}})
	for _, inst := range []*jobapitest.Instance{a, b} {
		resp, body := as(t, inst.URL, tok.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantStatus(t, resp, body, http.StatusOK)
	}
	resp, body := as(t, b.URL, tok.Token, "DELETE", "/api/v4/personal_access_tokens/self", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusNoContent)
	for name, inst := range map[string]*jobapitest.Instance{"a": a, "b": b} {
		resp, body := bearer(t, inst.URL, tok.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
		if e := decode[map[string]string](t, body); e["error"] != "invalid_token" || !strings.Contains(e["error_description"], "revoked") {
			t.Errorf("replica %s: revoked token's answer %s", name, body)
		}
	}
	var got api.PersonalAccessToken
	a.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/personal_access_tokens/%d", tok.ID), nil, &got)
	if !got.Revoked || got.Active {
		t.Errorf("revoked token reads %+v", got)
	}
	// Revoking it again is a 400, by the admin as by anyone.
	resp, body = a.Do(t, "DELETE", fmt.Sprintf("/api/v4/personal_access_tokens/%d", tok.ID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)

	// An administrator revokes another token; blocking a user stops its tokens too, on both.
	other := createToken(t, a, alice.ID, map[string]any{"name": "ci", "scopes": []string{"api"}})
	a.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/block", alice.ID), nil, nil)
	for _, inst := range []*jobapitest.Instance{a, b} {
		resp, body := as(t, inst.URL, other.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)
	}
	b.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/unblock", alice.ID), nil, nil)
	resp, body = as(t, a.URL, other.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	b.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/personal_access_tokens/%d", other.ID), nil, nil)
	resp, body = as(t, a.URL, other.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
}

// TestExpiredTokenFailsOnEveryReplica: a token expiring tomorrow works on both replicas
// today and is a 401 on both once their clock reaches that day (midnight UTC, GitLab's).
func TestExpiredTokenFailsOnEveryReplica(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	a := jobapitest.Start(t, jobapitest.Options{Now: clock.Now})
	b := a.Replica(t, jobapitest.Options{Now: clock.Now})
	alice := createUser(t, a, "alice", false)
	tomorrow := clock.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	tok := createToken(t, a, alice.ID, map[string]any{"name": "short", "scopes": []string{"read_api"}, "expires_at": tomorrow})
	for _, inst := range []*jobapitest.Instance{a, b} {
		resp, body := as(t, inst.URL, tok.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantStatus(t, resp, body, http.StatusOK)
	}
	midnight, _ := time.Parse(time.DateOnly, tomorrow)
	clock.Set(midnight.Add(-time.Second))
	resp, body := as(t, b.URL, tok.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	clock.Set(midnight)
	for _, inst := range []*jobapitest.Instance{a, b} {
		resp, body := as(t, inst.URL, tok.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
		if e := decode[map[string]string](t, body); e["error"] != "invalid_token" || !strings.Contains(e["error_description"], "expired") {
			t.Errorf("expired token's answer %s", body)
		}
	}
	var got api.PersonalAccessToken
	a.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/personal_access_tokens/%d", tok.ID), nil, &got)
	if got.Active || got.Revoked {
		t.Errorf("expired token reads %+v: want inactive, not revoked", got)
	}
	// An expired token cannot be rotated into a fresh one.
	resp, body = a.Do(t, "POST", fmt.Sprintf("/api/v4/personal_access_tokens/%d/rotate", tok.ID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)
}

// TestRotationReplacesTheToken: rotating (by id as the admin, and /self as the user)
// answers a new secret with the same name and scopes, a week's expiry or the one asked
// for; the old secret is a 401 at once on both replicas, the new one works.
func TestRotationReplacesTheToken(t *testing.T) {
	t.Parallel()
	a := jobapitest.Start(t, jobapitest.Options{})
	b := a.Replica(t, jobapitest.Options{})
	alice := createUser(t, a, "alice", false)
	old := createToken(t, a, alice.ID, map[string]any{"name": "deploy", "scopes": []string{"api", "read_api"}})

	var next api.PersonalAccessToken
	a.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/personal_access_tokens/%d/rotate", old.ID), nil, &next)
	week := time.Now().UTC().Add(7 * 24 * time.Hour).Format(time.DateOnly)
	if next.ID == old.ID || next.Name != "deploy" || strings.Join(next.Scopes, ",") != "api,read_api" || next.Token == "" ||
		next.Token == old.Token || next.ExpiresAt == nil || *next.ExpiresAt != week {
		t.Fatalf("rotated token %+v (want a new secret, same name and scopes, expiring %s)", next, week)
	}
	for _, inst := range []*jobapitest.Instance{a, b} {
		resp, body := as(t, inst.URL, old.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
		resp, body = as(t, inst.URL, next.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantStatus(t, resp, body, http.StatusOK)
	}
	// The old one cannot be rotated again (no second successor).
	resp, body := a.Do(t, "POST", fmt.Sprintf("/api/v4/personal_access_tokens/%d/rotate", old.ID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)

	// Self-rotation with an expiry of the user's choosing.
	chosen := time.Now().UTC().AddDate(0, 0, 90).Format(time.DateOnly)
	resp, body = bearer(t, b.URL, next.Token, "POST", "/api/v4/personal_access_tokens/self/rotate?expires_at="+chosen, nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	third := decode[api.PersonalAccessToken](t, body)
	if third.ExpiresAt == nil || *third.ExpiresAt != chosen || third.Token == "" {
		t.Fatalf("self-rotated token %s", body)
	}
	resp, body = as(t, a.URL, next.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
	resp, body = as(t, a.URL, third.Token, "GET", "/api/v4/personal_access_tokens/self", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	resp, body = as(t, a.URL, third.Token, "POST", "/api/v4/personal_access_tokens/self/rotate", map[string]any{"expires_at": "yesterday"})
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)
}

// TestScopes: read_api reads but does not write (403 insufficient_scope, GitLab's body);
// an admin user's token is an administrator only with admin_mode; the runner scopes reach
// the runner routes and nothing else; the audit log names the user who acted.
func TestScopes(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	root := createUser(t, inst, "root", true)
	reader := createToken(t, inst, root.ID, map[string]any{"name": "reader", "scopes": []string{"read_api", "admin_mode"}})
	writer := createToken(t, inst, root.ID, map[string]any{"name": "writer", "scopes": []string{"api", "admin_mode"}})
	plain := createToken(t, inst, root.ID, map[string]any{"name": "no admin mode", "scopes": []string{"api"}})
	runners := createToken(t, inst, root.ID, map[string]any{"name": "runners", "scopes": []string{"manage_runner", "create_runner", "admin_mode"}})

	for _, send := range []func(*testing.T, string, string, string, string, any) (*http.Response, []byte){as, bearer} {
		resp, body := send(t, inst.URL, reader.Token, "GET", "/api/v4/projects", nil)
		jobapitest.WantStatus(t, resp, body, http.StatusOK)
		resp, body = send(t, inst.URL, reader.Token, "POST", "/api/v4/projects", map[string]any{"name": "app"})
		jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)
		e := decode[map[string]string](t, body)
		if e["error"] != "insufficient_scope" || e["scope"] != "api" ||
			e["error_description"] != "The request requires higher privileges than provided by the access token." ||
			!strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
			t.Errorf("read_api on a POST: %s (WWW-Authenticate %q)", body, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM projects`); n != 0 {
		t.Fatalf("%d projects after the refused POSTs", n)
	}
	resp, body := as(t, inst.URL, writer.Token, "POST", "/api/v4/projects", map[string]any{"name": "app"})
	jobapitest.WantStatus(t, resp, body, http.StatusCreated)
	// Without admin_mode an admin's token is no administrator (GitLab's admin mode).
	resp, body = as(t, inst.URL, plain.Token, "GET", "/api/v4/runners", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)
	resp, body = as(t, inst.URL, plain.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)

	// The runner scopes: create and manage runners, nothing else.
	resp, body = as(t, inst.URL, runners.Token, "POST", "/api/v4/user/runners", map[string]any{"runner_type": "instance_type", "description": "made by root"})
	jobapitest.WantStatus(t, resp, body, http.StatusCreated)
	created := decode[map[string]any](t, body)
	rid := int64(created["id"].(float64))
	resp, body = as(t, inst.URL, runners.Token, "PUT", "/api/v4/runners/"+strconv.FormatInt(rid, 10), map[string]any{"paused": true})
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	resp, body = as(t, inst.URL, runners.Token, "GET", "/api/v4/projects", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)
	resp, body = as(t, inst.URL, reader.Token, "DELETE", "/api/v4/runners/"+strconv.FormatInt(rid, 10), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)
	if e := decode[map[string]string](t, body); e["scope"] != "api manage_runner" {
		t.Errorf("read_api on DELETE /runners/:id: scope %q, want \"api manage_runner\"", e["scope"])
	}

	// The audit log names the user and the token, not "admin".
	var events []api.AuditEvent
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, &events)
	want := map[string]string{"project_created": fmt.Sprintf("root (token #%d)", writer.ID),
		"runner_created": fmt.Sprintf("root (token #%d)", runners.ID), "user_created": "admin (request "}
	for action, actor := range want {
		found := false
		for _, e := range events {
			if e.Action == action && strings.HasPrefix(e.Actor, actor) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s event by %q in %+v", action, actor, events)
		}
	}
}

// TestRefusedTokensAreThrottled: wrong personal access tokens spend the per-address budget
// the admin token's guesses spend (401 until it is spent, then 429 with Retry-After, the
// right token too from that address); another address keeps working. A user's revoked
// token, tried from many addresses, spends that user's budget (429), while the user's
// valid token keeps working.
func TestRefusedTokensAreThrottled(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	alice := createUser(t, inst, "alice", false)
	good := createToken(t, inst, alice.ID, map[string]any{"name": "good", "scopes": []string{"read_api"}})
	url := inst.URL + "/api/v4/user"

	guesser, other := fromAddress("127.0.0.12"), fromAddress("127.0.0.13")
	for i := range tokenguard.DefaultAdminFailuresPerClient {
		if resp := get(t, guesser, url, "glpat-guess"+strconv.Itoa(i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, resp.StatusCode)
		}
	}
	resp := get(t, guesser, url, "glpat-one-too-many")
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != http.StatusTooManyRequests || err != nil || secs < 1 || secs > 60 {
		t.Fatalf("a guess past the budget: %d Retry-After %q, want 429 and 1 to 60 s", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := get(t, guesser, url, good.Token); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the right token from the throttled address: %d, want 429", resp.StatusCode)
	}
	if resp := get(t, other, url, good.Token); resp.StatusCode != http.StatusOK {
		t.Fatalf("the right token from another address: %d, want 200", resp.StatusCode)
	}

	// A revoked token of alice's from many addresses (one try each): her budget, not theirs.
	old := createToken(t, inst, alice.ID, map[string]any{"name": "old", "scopes": []string{"api"}})
	inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/personal_access_tokens/%d", old.ID), nil, nil)
	statuses := map[int]int{}
	for i := range tokenguard.DefaultTokenFailuresPerUser + 1 {
		statuses[get(t, fromAddress(fmt.Sprintf("127.0.1.%d", 10+i)), url, old.Token).StatusCode]++
	}
	if statuses[http.StatusUnauthorized] != tokenguard.DefaultTokenFailuresPerUser || statuses[http.StatusTooManyRequests] != 1 {
		t.Fatalf("revoked token from %d addresses: %v, want %d×401 then 429", tokenguard.DefaultTokenFailuresPerUser+1, statuses, tokenguard.DefaultTokenFailuresPerUser)
	}
	if resp := get(t, fromAddress("127.0.1.200"), url, good.Token); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's valid token while her refused ones are throttled: %d, want 200", resp.StatusCode)
	}
}

// TestTokenLifetime: personal access tokens live at most JOBAPI_MAX_TOKEN_LIFETIME_DAYS
// (GitLab's 365): one asked for without expires_at gets that lifetime, a later expires_at, at
// creation or rotation, is a 400 naming the setting and creates nothing; the last day
// allowed is accepted. At 0 a token without expires_at never expires.
func TestTokenLifetime(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Date(2026, 3, 10, 15, 4, 5, 0, time.UTC))
	a := jobapitest.Start(t, jobapitest.Options{Now: clock.Now})
	alice := createUser(t, a, "alice", false)
	tokens := fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", alice.ID)

	plain := createToken(t, a, alice.ID, map[string]any{"name": "plain", "scopes": []string{"api"}})
	if plain.ExpiresAt == nil || *plain.ExpiresAt != "2027-03-10" {
		t.Errorf("a token without expires_at expires %v, want 2027-03-10 (365 days on)", plain.ExpiresAt)
	}
	last := createToken(t, a, alice.ID, map[string]any{"name": "last day", "scopes": []string{"api"}, "expires_at": "2027-03-10"})
	if last.ExpiresAt == nil || *last.ExpiresAt != "2027-03-10" {
		t.Errorf("a token asked for until the last day allowed: %v", last.ExpiresAt)
	}
	resp, body := a.Do(t, "POST", tokens, map[string]any{"name": "long", "scopes": []string{"api"}, "expires_at": "2027-03-11"})
	if msg := jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest); !strings.Contains(msg, "JOBAPI_MAX_TOKEN_LIFETIME_DAYS") ||
		!strings.Contains(msg, "2027-03-10") {
		t.Errorf("a token past the lifetime: %q, want it to name the setting and the last day", msg)
	}
	resp, body = as(t, a.URL, plain.Token, "POST", "/api/v4/personal_access_tokens/self/rotate", map[string]any{"expires_at": "2030-01-01"})
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)
	resp, body = as(t, a.URL, plain.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK) // the refused rotation revoked nothing
	if n := jobapitest.QueryInt(t, a.Pool, `SELECT count(*) FROM personal_access_tokens`); n != 2 {
		t.Errorf("%d tokens after the refused ones, want 2", n)
	}

	// A shorter bound, and none at all.
	short := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) { c.MaxTokenLifetimeDays = 30 }})
	bob := createUser(t, short, "bob", false)
	if tok := createToken(t, short, bob.ID, map[string]any{"name": "b", "scopes": []string{"read_api"}}); tok.ExpiresAt == nil || *tok.ExpiresAt != "2026-04-09" {
		t.Errorf("with 30 days, a token without expires_at expires %v, want 2026-04-09", tok.ExpiresAt)
	}
	resp, body = short.Do(t, "POST", fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", bob.ID),
		map[string]any{"name": "c", "scopes": []string{"api"}, "expires_at": "2026-04-10"})
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)
	unbounded := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) { c.MaxTokenLifetimeDays = 0 }})
	carol := createUser(t, unbounded, "carol", false)
	if tok := createToken(t, unbounded, carol.ID, map[string]any{"name": "c", "scopes": []string{"api"}}); tok.ExpiresAt != nil {
		t.Errorf("without a bound, a token without expires_at expires %v, want never", *tok.ExpiresAt)
	}
	createToken(t, unbounded, carol.ID, map[string]any{"name": "d", "scopes": []string{"api"}, "expires_at": "2999-01-01"})
}
