package webtest

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
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
	op := oidcprovider.Start(t)
	op.AddUser(oidcprovider.User{Subject: "sub-alice", Username: "alice", Password: "pw-a", Name: "Alice Liddell",
		Email: "alice@example.com", Groups: []string{"ci"}})
	op.AddUser(oidcprovider.User{Subject: "sub-mallory", Username: "mallory", Password: "pw-m", Name: "Mallory",
		Email: "mallory@example.com", Groups: []string{"other"}})
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
