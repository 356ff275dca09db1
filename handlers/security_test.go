package handlers

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Findings of the outside review that the HTTP layer alone answers: these tests need no
// backend (the requests fail before the service is called, or readiness is faked).

// A runner version of 255 bytes and more, with a multi-byte character across the cut, was
// clipped in the middle of the character: Postgres refused the invalid UTF-8 and the
// runner got 400 "strings must not contain NUL".
func TestClipCutsOnRuneBoundary(t *testing.T) {
	for _, in := range []string{
		strings.Repeat("a", 254) + "é",
		strings.Repeat("a", 255) + "é",
		strings.Repeat("a", 253) + "€x",
		strings.Repeat("é", 200),
		strings.Repeat("😀", 100),
	} {
		got := clip(in)
		if !utf8.ValidString(got) || len(got) > 255 || !strings.HasPrefix(in, got) || len(got) < 252 {
			t.Errorf("clip(%d bytes ending %q) = %d bytes ending %q: want a valid UTF-8 prefix of 252-255 bytes",
				len(in), in[len(in)-6:], len(got), got[max(len(got)-6, 0):])
		}
	}
	if s := strings.Repeat("a", 255); clip(s) != s {
		t.Error("a string of 255 bytes must be kept whole")
	}
}

type failingHealth struct{ err error }

func (f failingHealth) Ready(*http.Request) error { return f.err }

func testHandler(t *testing.T, d Deps) (http.Handler, *prometheus.Registry) {
	t.Helper()
	if d.Logger == nil {
		d.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	return New(d), d.Registry
}

// /-/readiness must not tell anyone what is wrong with the backends (addresses, users,
// database names in driver errors); the admin token gets the details.
func TestReadinessDetailsOnlyForAdmin(t *testing.T) {
	secret := errors.New(`postgres: failed to connect to user=jobapi database=prod host=10.1.2.3`)
	h, _ := testHandler(t, Deps{AdminToken: "admin-secret", Health: failingHealth{secret}})
	for _, tc := range []struct {
		name, token string
		details     bool
	}{{"anonymous", "", false}, {"wrong token", "guess", false}, {"admin", "admin-secret", true}} {
		r := httptest.NewRequest(http.MethodGet, "/-/readiness", nil)
		if tc.token != "" {
			r.Header.Set("PRIVATE-TOKEN", tc.token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d, want 503", tc.name, w.Code)
		}
		var body map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["status"] != "unavailable" {
			t.Fatalf("%s: body %s: want {status: unavailable}", tc.name, w.Body)
		}
		if leaked := strings.Contains(w.Body.String(), "10.1.2.3"); leaked != tc.details {
			t.Errorf("%s: body %s: backend details shown = %v, want %v", tc.name, w.Body, leaked, tc.details)
		}
	}
}

// rawRequest writes head and body on a fresh connection to srv, optionally half-closes it,
// and returns the response (nil with the error when none arrives within wait).
func rawRequest(t *testing.T, srv *httptest.Server, head, body string, halfClose bool, wait time.Duration) (*http.Response, string, error) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		_ = conn.(*net.TCPConn).CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// A body cut off mid-stream is the client's failure: 400 with a JSON message, not a 503
// "backend unavailable" that operators would count as an outage.
func TestTruncatedBodyIsClientError(t *testing.T) {
	h, reg := testHandler(t, Deps{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct{ name, head, body string }{
		{"trace", "PATCH /api/v4/jobs/1/trace HTTP/1.1\r\nHost: x\r\nJOB-TOKEN: glcbt-x\r\nContent-Range: 0-99\r\nContent-Length: 100\r\n",
			strings.Repeat("x", 50)},
		{"update", "PUT /api/v4/jobs/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n",
			`{"token":"glcbt-x","state":`},
		{"verify", "POST /api/v4/runners/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n",
			`{"token":"glrt-`},
	} {
		resp, body, err := rawRequest(t, srv, tc.head, tc.body, true, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: no response: %v", tc.name, err)
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s %s, want 400 with a JSON message", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var msg struct{ Message string }
		if json.Unmarshal([]byte(body), &msg) != nil || msg.Message == "" {
			t.Errorf("%s: body %q: want a JSON message", tc.name, body)
		}
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("metrics: %d families, %v", len(mfs), err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && strings.HasPrefix(l.GetValue(), "5") {
					t.Errorf("%s counts a %s for a truncated body", mf.GetName(), l.GetValue())
				}
			}
		}
	}
}

// A runner JSON body must arrive within seconds: a client trickling it used to hold the
// connection for the server's whole ReadTimeout (5 minutes) before any token was checked.
func TestRunnerBodyReadIsBounded(t *testing.T) {
	t.Parallel()
	h, _ := testHandler(t, Deps{})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadTimeout = 5 * time.Minute // as server.Start configures it
	srv.Start()
	defer srv.Close()
	start := time.Now()
	resp, body, err := rawRequest(t, srv,
		"POST /api/v4/runners/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n",
		`{"token":"glrt-`, false, runnerBodyTimeout+5*time.Second)
	if err != nil {
		t.Fatalf("no answer %v after the body stalled: %v", time.Since(start).Round(time.Second), err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d %s, want 408", resp.StatusCode, body)
	}
	if took := time.Since(start); took < runnerBodyTimeout-time.Second {
		t.Errorf("answered after %v, before the %v bound", took, runnerBodyTimeout)
	}
}

// The bound applies to the body only: once it is read, a long poll may hold the request as
// long as it likes (net/http clears the deadline when the body hits EOF).
func TestBodyDeadlineSparesLongRequests(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("/", bodyDeadline(200*time.Millisecond)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("read body: %v", err)
		}
		select {
		case <-time.After(time.Second):
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
			t.Errorf("request canceled while held after its body was read: %v", r.Context().Err())
		}
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, body := range []string{"", `{"a":1}`} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("body %q: status %d, want 204", body, resp.StatusCode)
		}
	}
}
