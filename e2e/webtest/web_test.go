// Package webtest checks the operator web UI served at / by a real replica: over plain HTTP
// (sessions, CSRF, pages, actions, the event stream) here, and in headless Chromium
// (browser_test.go) for what only a browser shows: live updates, the log tail, countdowns.
package webtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// browser is a cookie-keeping HTTP client that signs in like a person with a browser.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func newBrowser(t testing.TB, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		// What a browser sends with a form of the same origin.
		req.Header.Set("Origin", b.base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp, string(raw)
}

// get fetches a page and requires want.
func (b *browser) get(path string, want int) string {
	b.t.Helper()
	resp, body := b.do("GET", path, nil)
	if resp.StatusCode != want {
		b.t.Fatalf("GET %s: %d, want %d:\n%s", path, resp.StatusCode, want, body)
	}
	return body
}

func (b *browser) signIn(token string) *http.Response {
	b.t.Helper()
	resp, _ := b.do("POST", "/sign_in", url.Values{"token": {token}, "next": {"/runners"}})
	return resp
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// csrf reads the session's token from a page, as the forms carry it.
func (b *browser) csrf() string {
	b.t.Helper()
	m := csrfMeta.FindStringSubmatch(b.get("/projects", http.StatusOK)) // every signed-in user's page
	if m == nil {
		b.t.Fatal("no CSRF token on the page")
	}
	return m[1]
}

// post sends a form with the session's CSRF token and requires want.
func (b *browser) post(path string, form url.Values, want int) (*http.Response, string) {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if !form.Has("csrf_token") {
		form.Set("csrf_token", b.csrf())
	}
	resp, body := b.do("POST", path, form)
	if resp.StatusCode != want {
		b.t.Fatalf("POST %s: %d, want %d:\n%s", path, resp.StatusCode, want, body)
	}
	return resp, body
}

func TestSignInSessionAndSignOut(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	b := newBrowser(t, inst.URL)

	// Without a session every page sends the browser to sign in, and comes back after.
	resp, _ := b.do("GET", "/runners?page=1", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/sign_in?next=%2Frunners%3Fpage%3D1" {
		t.Fatalf("anonymous page: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := b.do("GET", "/events?pipelines", nil, "Accept", "text/event-stream"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous event stream: %d %s", resp.StatusCode, body)
	}
	// The API is untouched: JSON, PRIVATE-TOKEN.
	if resp, _ := b.do("GET", "/api/v4/runners", nil); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("API without token: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	if resp := b.signIn("not-the-token"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp = b.signIn(jobapitest.AdminToken)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runners" {
		t.Fatalf("sign in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Secure {
		t.Fatalf("session cookie over plain HTTP: %+v; want HttpOnly, SameSite=Strict, not Secure", cookies)
	}
	stolen := cookies[0]
	page := b.get("/runners", http.StatusOK)
	if !strings.Contains(page, "<h1>Runners") {
		t.Fatalf("runners page:\n%s", page)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options"} {
		if resp, _ := b.do("GET", "/runners", nil); resp.Header.Get(h) == "" {
			t.Errorf("page without %s", h)
		}
	}

	// Behind TLS the cookie is Secure and host-only (__Host-).
	tls := newBrowser(t, inst.URL)
	resp, _ = tls.do("POST", "/sign_in", url.Values{"token": {jobapitest.AdminToken}}, "X-Forwarded-Proto", "https")
	if c := resp.Cookies(); len(c) != 1 || !c[0].Secure || c[0].Name != "__Host-jobapi_session" {
		t.Fatalf("cookie behind TLS: %+v", c)
	}

	// Sign-out clears the cookie and revokes the session: a copy of it no longer works.
	b.post("/sign_out", nil, http.StatusOK)
	if resp, _ := b.do("GET", "/runners", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d", resp.StatusCode)
	}
	copyJar := newBrowser(t, inst.URL)
	u, _ := url.Parse(inst.URL)
	copyJar.c.Jar.SetCookies(u, []*http.Cookie{stolen})
	if resp, _ := copyJar.do("GET", "/runners", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a copy of a signed-out cookie still works: %d", resp.StatusCode)
	}
	// A forged cookie is refused too.
	forged := newBrowser(t, inst.URL)
	forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: stolen.Name, Value: stolen.Value[:len(stolen.Value)-2] + "AA"}})
	if resp, _ := forged.do("GET", "/runners", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("forged cookie: %d", resp.StatusCode)
	}
}

func TestCSRFIsRefused(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runnerID, _ := inst.CreateRunner(t)
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	path := fmt.Sprintf("/runners/%d/pause", runnerID)

	// A wrong token, and none at all: 403, and the runner is not paused.
	for _, token := range []string{"wrong-token", ""} {
		resp, body := b.do("POST", path, url.Values{"csrf_token": {token}})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF token") {
			t.Fatalf("POST with csrf_token %q: %d\n%s", token, resp.StatusCode, body)
		}
	}
	// Another session's token is wrong for this one.
	other := newBrowser(t, inst.URL)
	other.signIn(jobapitest.AdminToken)
	if resp, _ := b.do("POST", path, url.Values{"csrf_token": {other.csrf()}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another session's token: %d", resp.StatusCode)
	}
	// The right token from another site: CrossOriginProtection refuses it first.
	req, _ := http.NewRequest("POST", inst.URL+path, strings.NewReader(url.Values{"csrf_token": {b.csrf()}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site POST: %d", resp.StatusCode)
	}
	var r struct {
		Paused bool `json:"paused"`
	}
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", runnerID), nil, &r)
	if r.Paused {
		t.Fatal("a refused request paused the runner")
	}
	// With the right token it works.
	b.post(path, nil, http.StatusSeeOther)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", runnerID), nil, &r)
	if !r.Paused {
		t.Fatal("the runner was not paused")
	}
}

func TestPagesShowWhatTheAPIKnows(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.AckTTL = time.Minute }})
	inst.EnableTwoPhase(t, 7)
	runner := inst.NewRunner(t)
	runner.Info.Features.TwoPhaseJobCommit = true
	runner.Info.Executor = "docker"
	runner.Info.Version = "19.4.0"
	p := inst.CreatePipeline(t, 7, []string{"build", "test"},
		jobapitest.Job{"name": "compile", "stage": "build", "script": []string{"make"}},
		jobapitest.Job{"name": "unit", "stage": "test", "script": []string{"make test"}},
	)
	job := runner.TakeNamed(t, "compile")
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)

	list := b.get("/pipelines?project=7", http.StatusOK)
	for _, want := range []string{fmt.Sprintf(`href="/projects/7/pipelines/%d"`, p.ID), `class="badge s-running"`, "main"} {
		if !strings.Contains(list, want) {
			t.Errorf("pipelines list lacks %q", want)
		}
	}
	if bad := b.get("/pipelines?project=x", http.StatusBadRequest); !strings.Contains(bad, "Project must be a project id") {
		t.Error("a bad filter is not explained")
	}
	if other := b.get("/pipelines?project=8", http.StatusOK); !strings.Contains(other, "No pipelines match the filter") {
		t.Error("another project's filter shows pipelines")
	}

	graph := b.get(fmt.Sprintf("/projects/7/pipelines/%d", p.ID), http.StatusOK)
	for _, want := range []string{`aria-label="Stage build"`, `data-name="compile" data-status="waiting_for_runner_ack"`, `data-name="unit" data-status="created"`} {
		if !strings.Contains(graph, want) {
			t.Errorf("pipeline page lacks %q", want)
		}
	}
	jobPage := b.get(fmt.Sprintf("/projects/7/jobs/%d", job.ID), http.StatusOK)
	for _, want := range []string{`id="ack-countdown"`, "Waiting for the runner to acknowledge", `data-step="acknowledged"`, runner.SystemID} {
		if !strings.Contains(jobPage, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	b.get("/projects/8/jobs/"+fmt.Sprint(job.ID), http.StatusNotFound)

	runners := b.get("/runners", http.StatusOK)
	for _, want := range []string{runner.SystemID, "19.4.0", "docker", "<td>yes</td>"} {
		if !strings.Contains(runners, want) {
			t.Errorf("runners page lacks %q", want)
		}
	}
	twoPhase := b.get("/two_phase", http.StatusOK)
	for _, want := range []string{fmt.Sprintf(`<tr data-job="%d">`, job.ID), `<code>project:7</code>`, `id="flag-state">conditional`} {
		if !strings.Contains(twoPhase, want) {
			t.Errorf("two-phase page lacks %q", want)
		}
	}

	// The ack and a log with a section: the job page shows the latency and the log.
	jobapitest.WantUpdate(t, "ack", runner.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "running")
	log := "section_start:1700000000:step_script[collapsed=true]\r\x1b[0K\x1b[36;1mExecuting\x1b[0;m\n\x1b[31mboom\x1b[0m\nsection_end:1700000004:step_script\r\x1b[0K\n"
	runner.Patch(t, job, 0, log)
	jobPage = b.get(fmt.Sprintf("/projects/7/jobs/%d", job.ID), http.StatusOK)
	for _, want := range []string{"ack latency", `<span class="term-fg31">boom</span>`, `<span class="dur">4s</span>`, `data-live-log`} {
		if !strings.Contains(jobPage, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	twoPhase = b.get("/two_phase", http.StatusOK)
	if !strings.Contains(twoPhase, `id="ack-latency"`) || !strings.Contains(twoPhase, "<dt>p50</dt>") {
		t.Error("two-phase page shows no ack latency after an ack")
	}
	raw := b.get(fmt.Sprintf("/projects/7/jobs/%d/log/raw", job.ID), http.StatusOK)
	if raw != log {
		t.Errorf("raw log %q, want %q", raw, log)
	}
}

// waitHealthy waits until the replica's hub is subscribed: hints sent before that are not
// delivered (pages reload on connect for that reason).
func waitHealthy(t testing.TB, inst *jobapitest.Instance) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !inst.Hub.Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("the web UI's change subscription never became live")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEventStreamWakesOnChanges(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "unit", "stage": "test", "script": []string{"true"}})
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/events?pipeline=%d", inst.URL, p.ID), nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "event: ") {
				events <- strings.TrimPrefix(line, "event: ")
			}
		}
		close(events)
	}()
	waitHealthy(t, inst)
	// The claim (a change hint, batched) and the finish (a pipeline event) each wake it.
	job := runner.Take(t)
	wantEvent(t, events, "change")
	runner.Finish(t, job, runnerclient.StateSuccess, "")
	wantEvent(t, events, "change")
}

func wantEvent(t *testing.T, events <-chan string, want string) {
	t.Helper()
	select {
	case got, ok := <-events:
		if !ok || got != want {
			t.Fatalf("event %q (open %v), want %q", got, ok, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no %q event within 20 s", want)
	}
}
