package webtest

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// hostileNext are sign-in targets that a browser would follow to another host: tab, CR and
// LF are dropped from URLs ("/\t/evil" is "//evil"), a backslash is a slash, and a proxy
// may decode the path.
var hostileNext = []string{
	"//evil.example/", "/\\evil.example", "/\t/evil.example", "/\r\n/evil.example",
	"/%09/evil.example", "/%2F/evil.example", "https://evil.example/", "javascript:alert(1)",
}

// TestSignInNextStaysOnSite: wherever next points, signing in ends on this site.
func TestSignInNextStaysOnSite(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	for _, next := range hostileNext {
		b := newBrowser(t, inst.URL)
		// The page carries the target into its form only when it is local.
		page := b.get("/sign_in?next="+url.QueryEscape(next), http.StatusOK)
		if !strings.Contains(page, `name="next" value="/"`) {
			t.Errorf("sign-in page for next=%q carries another target:\n%s", next, page)
		}
		// The form posted with it anyway (a crafted page) lands on /.
		resp, _ := b.do("POST", "/sign_in", url.Values{"token": {jobapitest.AdminToken}, "next": {next}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Errorf("sign-in with next=%q: %d to %q, want 303 to /", next, resp.StatusCode, resp.Header.Get("Location"))
		}
		// Signed in already, the sign-in page redirects at once: to / as well.
		resp, _ = b.do("GET", "/sign_in?next="+url.QueryEscape(next), nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Errorf("signed-in sign-in page with next=%q: %d to %q, want 303 to /", next, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// A page of this site is where sign-in leads.
	b := newBrowser(t, inst.URL)
	resp, _ := b.do("POST", "/sign_in", url.Values{"token": {jobapitest.AdminToken}, "next": {"/runners?page=1"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runners?page=1" {
		t.Fatalf("sign-in with a local next: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestNoticeIsAFixedMessage: a link's ?notice= can only pick one of jobapi's own messages;
// text of its own never shows on the page.
func TestNoticeIsAFixedMessage(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runnerID, _ := inst.CreateRunner(t)
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)

	phish := "Your session token expired: mail it to admin@evil.example to restore access."
	for _, path := range []string{"/runners", "/pipelines", "/two_phase"} {
		page := b.get(path+"?notice="+url.QueryEscape(phish), http.StatusOK)
		if strings.Contains(html.UnescapeString(page), "mail it to") || strings.Contains(page, `class="notice"`) {
			t.Errorf("%s shows the query's notice text:\n%s", path, page)
		}
	}
	// An action's redirect names its message by code, and the page shows that message.
	resp, _ := b.post(fmt.Sprintf("/runners/%d/pause", runnerID), nil, http.StatusSeeOther)
	loc := resp.Header.Get("Location")
	if loc != "/runners?notice=runner_paused" {
		t.Fatalf("pause redirects to %q", loc)
	}
	if page := b.get(loc, http.StatusOK); !strings.Contains(page, `<p class="notice" role="status">Runner paused: it takes no new jobs.</p>`) {
		t.Fatalf("runners page after pause lacks its notice:\n%s", page)
	}
}
