package hooktest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// received is one request a receiver got.
type received struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// receiver is a real HTTP server that records what it is sent and answers with answer
// (nil: 200).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(r received, n int) (int, string)
}

func newReceiver(t *testing.T, answer func(r received, n int) (int, string)) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := received{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: body}
		rc.mu.Lock()
		rc.got = append(rc.got, req)
		n := len(rc.got)
		rc.mu.Unlock()
		code, text := http.StatusOK, `{"ok":true}`
		if rc.answer != nil {
			code, text = rc.answer(req, n)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, text)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// waitFor polls until ok holds for the requests received, or fails the test after timeout.
func (rc *receiver) waitFor(t *testing.T, timeout time.Duration, what string, ok func([]received) bool) []received {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := rc.requests()
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver: %s did not arrive within %s; got %d requests:\n%s", what, timeout, len(got), describe(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describe(got []received) string {
	s := ""
	for _, r := range got {
		s += r.Method + " " + r.Path + " " + r.Header.Get("X-Gitlab-Event") + " " + string(r.Body[:min(len(r.Body), 200)]) + "\n"
	}
	return s
}
