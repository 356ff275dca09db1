package webtest

import (
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/tokenguard"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// fromAddress is a browser whose connections come from another loopback address: another
// client as far as the server can tell.
func fromAddress(t *testing.T, base, ip string) *browser {
	jar, _ := cookiejar.New(nil)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}).DialContext
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Transport: tr, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// TestAdminTokenGuessingIsThrottled: wrong admin tokens, on the API's PRIVATE-TOKEN and on
// the web sign-in, spend one budget per client address; past it every attempt from that
// address gets 429 with Retry-After, the right token too (a guesser must not learn which
// guess is right), and the sign-in page says so. Another address with the right token
// keeps working.
func TestAdminTokenGuessingIsThrottled(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	guesser := fromAddress(t, inst.URL, "127.0.0.2")
	operator := fromAddress(t, inst.URL, "127.0.0.3")

	// The right token from the guesser's address, before any failure: never counted.
	for range 3 * tokenguard.DefaultAdminFailuresPerClient {
		if resp, body := guesser.do("GET", "/api/v4/runners", nil, "PRIVATE-TOKEN", jobapitest.AdminToken); resp.StatusCode != http.StatusOK {
			t.Fatalf("right token: %d %s", resp.StatusCode, body)
		}
	}
	// Half the budget on the API, half on the sign-in form: one budget.
	for i := range tokenguard.DefaultAdminFailuresPerClient {
		if i%2 == 0 {
			if resp, body := guesser.do("GET", "/api/v4/runners", nil, "PRIVATE-TOKEN", "guess-"+strconv.Itoa(i)); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("guess %d on the API: %d %s, want 401", i, resp.StatusCode, body)
			}
		} else if resp := guesser.signIn("guess-" + strconv.Itoa(i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d on the sign-in: %d, want 401", i, resp.StatusCode)
		}
	}
	resp, body := guesser.do("GET", "/api/v4/runners", nil, "PRIVATE-TOKEN", "one-guess-too-many")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many wrong tokens") {
		t.Fatalf("a guess past the budget: %d Retry-After %q %s, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 60 {
		t.Errorf("Retry-After %q, want 1 to 60 seconds", resp.Header.Get("Retry-After"))
	}
	// Now the right token from that address is throttled too, on both doors.
	if resp, _ := guesser.do("GET", "/api/v4/runners", nil, "PRIVATE-TOKEN", jobapitest.AdminToken); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("right token from a throttled address: %d, want 429", resp.StatusCode)
	}
	resp, body = guesser.do("POST", "/sign_in", url.Values{"token": {jobapitest.AdminToken}, "next": {"/runners"}})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || len(resp.Cookies()) != 0 ||
		!strings.Contains(body, "Too many wrong tokens from your address. Try again in") {
		t.Fatalf("sign-in from a throttled address: %d Retry-After %q cookies %v\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Cookies(), body)
	}
	// The operator elsewhere is not locked out by the guesser.
	if resp, body := operator.do("GET", "/api/v4/runners", nil, "PRIVATE-TOKEN", jobapitest.AdminToken); resp.StatusCode != http.StatusOK {
		t.Fatalf("right token from another address: %d %s", resp.StatusCode, body)
	}
	if resp := operator.signIn(jobapitest.AdminToken); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in from another address: %d", resp.StatusCode)
	}
}
