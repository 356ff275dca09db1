package webtest

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv/oidcprovider"
)

// TestSingleSignInWithOpenIDConnect signs people in to the web UI through a real OpenID
// Provider (zitadel's op, testenv/oidcprovider) with an HTTP client that follows its
// redirects and posts its login form: the first sign-in creates the user, the second
// reuses it (a rename at the provider too), an account outside the required group is
// refused with nothing created, a callback that is not this browser's is refused, and what
// the signed-in user does names them in the audit log.
func TestSingleSignInWithOpenIDConnect(t *testing.T) {
	t.Parallel()
	op, inst := startWithProvider(t)
	op.AddUser(oidcprovider.User{Subject: "sub-mallory", Username: "mallory", Password: "pw-m", Name: "Mallory",
		Email: "mallory@example.com", Groups: []string{"other"}})
	ctx := context.Background()

	signIn := func(user, password string) (*http.Client, int, string) {
		t.Helper()
		b := oidcprovider.NewBrowser()
		page := getPage(t, b, inst.URL+"/sign_in")
		if !strings.Contains(page, `href="/oidc/start?next=`) || !strings.Contains(page, "Sign in with ") {
			t.Fatalf("the sign-in page offers no single sign-in:\n%s", page)
		}
		cb, err := op.LogIn(ctx, b, inst.URL+"/oidc/start?next=/projects", user, password)
		if err != nil {
			t.Fatalf("log in as %s: %v", user, err)
		}
		resp, err := b.Get(cb.String())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return b, resp.StatusCode, html.UnescapeString(string(body))
	}
	usersNamed := func(name string) []api.UserDetail {
		var list []api.UserDetail
		inst.MustDo(t, http.StatusOK, "GET", "/api/v4/users?username="+name, nil, &list)
		return list
	}

	// First sign-in: the user is made from the claims; the browser is signed in as them.
	b, code, body := signIn("alice", "pw-a")
	if code != http.StatusOK || !strings.Contains(body, "Signed in as alice") || !strings.Contains(body, `url=/projects`) {
		t.Fatalf("first sign-in: %d\n%s", code, body)
	}
	created := usersNamed("alice")
	if len(created) != 1 || created[0].Name != "Alice Liddell" || created[0].Email != "alice@example.com" {
		t.Fatalf("users named alice after the first sign-in: %+v", created)
	}
	if page := getPage(t, b, inst.URL+"/projects"); !strings.Contains(page, "alice") {
		t.Errorf("the signed-in page does not name alice:\n%.2000s", page)
	}
	// Second sign-in, renamed at the provider: the same user.
	op.AddUser(oidcprovider.User{Subject: "sub-alice", Username: "alice.l", Password: "pw-a", Name: "Alice L.",
		Email: "alice@example.com", Groups: []string{"ci"}})
	if _, code, body := signIn("alice.l", "pw-a"); code != http.StatusOK || !strings.Contains(body, "Signed in as alice<") {
		t.Fatalf("second sign-in: %d\n%s", code, body)
	}
	if again := usersNamed("alice.l"); len(again) != 0 {
		t.Errorf("the renamed account made another user: %+v", again)
	}

	// Outside the required group: refused, said so, nothing created.
	if _, code, body := signIn("mallory", "pw-m"); code != http.StatusForbidden || !strings.Contains(body, "not in the group ci") {
		t.Errorf("mallory (not in ci): %d\n%s", code, body)
	}
	if list := usersNamed("mallory"); len(list) != 0 {
		t.Errorf("a refused sign-in created %+v", list)
	}

	// A callback whose state is not this browser's: refused, no session.
	other := oidcprovider.NewBrowser()
	cb, err := op.LogIn(ctx, other, inst.URL+"/oidc/start", "alice.l", "pw-a")
	if err != nil {
		t.Fatal(err)
	}
	q := cb.Query()
	q.Set("state", "forged")
	cb.RawQuery = q.Encode()
	resp, err := other.Get(cb.String())
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(forged), "does not belong to a sign-in begun in this browser") {
		t.Errorf("forged state: %d\n%s", resp.StatusCode, forged)
	}
	if page := getPage(t, other, inst.URL+"/sign_in"); !strings.Contains(page, `name="token"`) {
		t.Error("a refused callback left a session")
	}
}

// startWithProvider starts a real OpenID Provider with one account, alice (Alice Liddell,
// group ci), and a jobapi whose web UI signs in there, limited to the group ci.
func startWithProvider(t *testing.T) (*oidcprovider.Provider, *jobapitest.Instance) {
	t.Helper()
	op := oidcprovider.Start(t)
	op.AddUser(oidcprovider.User{Subject: "sub-alice", Username: "alice", Password: "pw-a", Name: "Alice Liddell",
		Email: "alice@example.com", Groups: []string{"ci"}})
	// jobapi's address is known only once it listens: the provider calls back here, and
	// this forwards to jobapi's /oidc/callback as a proxy in front of it would.
	var jobapiURL string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, jobapiURL+"/oidc/callback?"+r.URL.RawQuery, http.StatusFound)
	}))
	t.Cleanup(front.Close)
	op.AddClient("jobapi", "client-secret", front.URL+"/cb")
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.OIDC.IssuerURL, c.OIDC.ClientID, c.OIDC.ClientSecret = op.Issuer, "jobapi", "client-secret"
		c.OIDC.RedirectURL, c.OIDC.RequiredGroup = front.URL+"/cb", "ci"
	}})
	jobapiURL = inst.URL
	return op, inst
}

// TestSignedInUserIsNamedOnTheirRetry: a person who signs in with the provider for the first
// time becomes a user; made a developer of a project, they retry a failed job from the web
// UI, and the job's retried event and the audit log name them, not the admin.
func TestSignedInUserIsNamedOnTheirRetry(t *testing.T) {
	t.Parallel()
	op, inst := startWithProvider(t)
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "sso"}, &proj)
	// On a branch of its own: main is protected, and a developer may not retry there.
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", proj.ID),
		map[string]any{"ref": "feature", "stages": []string{"test"},
			"jobs": []jobapitest.Job{{"name": "unit", "stage": "test", "script": []string{"false"}}}}, nil)
	runner := inst.NewRunner(t)
	job := runner.TakeNamed(t, "unit")
	runner.Finish(t, job, runnerclient.StateFailed, "script_failure")

	b := oidcprovider.NewBrowser()
	cb, err := op.LogIn(context.Background(), b, inst.URL+"/oidc/start?next=/projects", "alice", "pw-a")
	if err != nil {
		t.Fatalf("log in as alice: %v", err)
	}
	if page := getPage(t, b, cb.String()); !strings.Contains(page, "Signed in as alice") {
		t.Fatalf("sign-in:\n%s", page)
	}
	var alice []api.UserDetail
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/users?username=alice", nil, &alice)
	if len(alice) != 1 {
		t.Fatalf("users named alice after the sign-in: %+v", alice)
	}
	jobPath := fmt.Sprintf("/projects/%d/jobs/%d", proj.ID, job.ID)
	// Not a member yet: the project does not exist for her.
	if resp, err := b.Get(inst.URL + jobPath); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a non-member's job page: %v, %v", resp.StatusCode, err)
	}
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/members", proj.ID),
		map[string]any{"user_id": alice[0].ID, "access_level": 30}, nil)

	m := csrfMeta.FindStringSubmatch(getPage(t, b, inst.URL+jobPath))
	if m == nil {
		t.Fatal("no CSRF token on the job page")
	}
	b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := b.PostForm(inst.URL+jobPath+"/retry", url.Values{"csrf_token": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retry from the web UI: %d\n%.2000s", resp.StatusCode, body)
	}

	const want = "alice (web session "
	var eventActor string
	for _, e := range inst.Events(t, proj.ID, job.ID) {
		if e.Type == "retried" {
			eventActor = fmt.Sprint(e.Detail["actor"])
		}
	}
	if !strings.HasPrefix(eventActor, want) {
		t.Errorf("the retried event's actor is %q, want %s…", eventActor, want)
	}
	var audit []api.AuditEvent
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, &audit)
	var auditActor string
	for _, e := range audit {
		if e.Action == "job_retried" && e.Target == fmt.Sprintf("job:%d", job.ID) {
			auditActor = e.Actor
		}
	}
	if !strings.HasPrefix(auditActor, want) {
		t.Errorf("the audit's job_retried actor is %q, want %s…", auditActor, want)
	}
}

func getPage(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return html.UnescapeString(string(b))
}
