package webtest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestSignInWithPersonalAccessToken: a user signs in with a personal access token as
// themselves (the page names them, the audit log names them on an action); the session is
// a new one, in a __Host- cookie behind TLS, with CSRF as the admin token's. An admin's
// token without admin_mode, or a non-admin's, gets no administrator pages; a read_api
// token gives a session that can only read; a token with neither api nor read_api, a
// revoked one, cannot sign in. Blocking the user ends the session at once on every replica.
func TestSignInWithPersonalAccessToken(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	other := inst.Replica(t, jobapitest.Options{})
	user := func(name string, admin bool) api.UserDetail {
		var u api.UserDetail
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/users", map[string]any{"username": name, "name": name,
			"email": name + "@example.com", "admin": admin}, &u)
		return u
	}
	token := func(u api.UserDetail, scopes ...string) api.PersonalAccessToken {
		var tok api.PersonalAccessToken
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", u.ID),
			map[string]any{"name": "web", "scopes": scopes}, &tok)
		return tok
	}
	alice, bob := user("alice", true), user("bob", false)
	runnerID, _ := inst.CreateRunner(t)

	b := newBrowser(t, inst.URL)
	resp := b.signIn(token(alice, "api", "admin_mode").Token)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runners" {
		t.Fatalf("sign in with alice's token: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if page := b.get("/runners", http.StatusOK); !strings.Contains(page, `<strong id="signed-in-as">alice</strong>`) {
		t.Fatalf("the page does not name alice:\n%s", page)
	}
	b.post(fmt.Sprintf("/runners/%d/pause", runnerID), nil, http.StatusSeeOther)
	var events []api.AuditEvent
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, &events)
	found := false
	for _, e := range events {
		found = found || (e.Action == "runner_updated" && strings.HasPrefix(e.Actor, "alice (web session "))
	}
	if !found {
		t.Fatalf("no runner_updated event by alice's web session: %+v", events)
	}
	// The session is alice's on the other replica too, and ends on both once she is blocked.
	ob := &browser{t: t, base: other.URL, c: b.c}
	ob.c.Jar.SetCookies(mustURL(t, other.URL), b.c.Jar.Cookies(mustURL(t, inst.URL)))
	ob.get("/runners", http.StatusOK)
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/block", alice.ID), nil, nil)
	if resp, body := ob.do("GET", "/runners", nil, "X-Requested-With", "fetch"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("blocked alice's session on the other replica: %d\n%s", resp.StatusCode, body)
	}
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/unblock", alice.ID), nil, nil)

	// An admin's token without admin_mode, and a non-admin's: signed in, no administrator pages.
	for name, tok := range map[string]string{"alice without admin_mode": token(alice, "api").Token, "bob": token(bob, "api").Token} {
		nb := newBrowser(t, inst.URL)
		if resp := nb.signIn(tok); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: sign in %d", name, resp.StatusCode)
		}
		if resp, body := nb.do("GET", "/runners", nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not an administrator") {
			t.Fatalf("%s on /runners: %d\n%s", name, resp.StatusCode, body)
		}
	}

	// read_api: the pages, no actions.
	rb := newBrowser(t, inst.URL)
	if resp := rb.signIn(token(alice, "read_api", "admin_mode").Token); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("read_api sign-in: %d", resp.StatusCode)
	}
	rb.get("/runners", http.StatusOK)
	if _, body := rb.post(fmt.Sprintf("/runners/%d/resume", runnerID), nil, http.StatusForbidden); !strings.Contains(body, "read_api") {
		t.Fatalf("read_api session's action: %s", body)
	}
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", runnerID), nil, &rn)
	if !rn.Paused {
		t.Fatalf("the read-only session resumed the runner")
	}

	// Tokens that cannot sign in: no api/read_api scope, revoked.
	runnersOnly := token(alice, "manage_runner")
	if resp := newBrowser(t, inst.URL).signIn(runnersOnly.Token); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("manage_runner-only token signed in: %d %v", resp.StatusCode, resp.Cookies())
	}
	revoked := token(bob, "api")
	inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/personal_access_tokens/%d", revoked.ID), nil, nil)
	if resp := newBrowser(t, inst.URL).signIn(revoked.Token); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("revoked token signed in: %d %v", resp.StatusCode, resp.Cookies())
	}

	// Behind TLS the cookie is __Host-, Secure, host-only, for /; each sign-in a new session.
	tb := newBrowser(t, inst.URL)
	tok := token(alice, "api", "admin_mode").Token
	var ids []string
	for range 2 {
		resp, _ := tb.do("POST", "/sign_in", url.Values{"token": {tok}, "next": {"/runners"}}, "X-Forwarded-Proto", "https")
		c := resp.Cookies()
		if len(c) != 1 || c[0].Name != "__Host-jobapi_session" || !c[0].Secure || c[0].Path != "/" || c[0].Domain != "" || !c[0].HttpOnly {
			t.Fatalf("sign-in behind TLS: cookies %+v", c)
		}
		ids = append(ids, c[0].Value)
	}
	if ids[0] == ids[1] {
		t.Errorf("two sign-ins gave the same session")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
