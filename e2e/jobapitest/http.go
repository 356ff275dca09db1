package jobapitest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// HTTPClient sends the harness's requests, and a test's own where they must not fail the
// test (from goroutines other than the test's). Its own transport keeps tests independent of
// http.DefaultTransport; its timeout is a safety net against a hung server, far above what
// any call takes on a quiet machine (a minute was reached on a 2-core machine at load 24 by
// the include fan-out test's 30 MiB repository fetch and refusal, 2 s when quiet).
var HTTPClient = &http.Client{
	Transport: http.DefaultTransport.(*http.Transport).Clone(),
	Timeout:   3 * time.Minute,
}

// Send makes one request to base+path and returns the response with its body read; a
// transport error fails the test. body: nil (none), []byte, string or io.Reader (sent as
// is), anything else JSON-encoded. hdr holds header name/value pairs; a body gets
// Content-Type application/json unless hdr sets another.
func Send(t testing.TB, base, method, path string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := HTTPClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, out
}

// Do is Send to this replica as the operator (PRIVATE-TOKEN set).
func (i *Instance) Do(t testing.TB, method, path string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return Send(t, i.URL, method, path, body, append([]string{"PRIVATE-TOKEN", AdminToken}, hdr...)...)
}

// MustDo is Do that fails the test unless the status is want, decoding the body into out.
func (i *Instance) MustDo(t testing.TB, want int, method, path string, body, out any) {
	t.Helper()
	resp, b := i.Do(t, method, path, body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// WantStatus fails the test unless resp (with its body, from Send or Do) has the status want.
func WantStatus(t testing.TB, resp *http.Response, body []byte, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d; body: %.500s", resp.Request.Method, resp.Request.URL.Path,
			resp.StatusCode, want, body)
	}
}

// WantJSONError checks an error answer as every bad input must get one: the status want,
// Content-Type application/json and a {"message": "..."} body with a non-empty message. It
// returns the message.
func WantJSONError(t testing.TB, resp *http.Response, body []byte, want int) string {
	t.Helper()
	WantStatus(t, resp, body, want)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q, want application/json", resp.Request.Method, resp.Request.URL.Path, ct)
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s %s: error body is not JSON: %.300s", resp.Request.Method, resp.Request.URL.Path, body)
	}
	msg, ok := e["message"].(string)
	if !ok || msg == "" {
		t.Errorf("%s %s: error body %.300s has no message string", resp.Request.Method, resp.Request.URL.Path, body)
	}
	return msg
}
