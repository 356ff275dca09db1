package handlers

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// TestFailMapsEndlessConflictsToRetryableUnavailable: a compare-and-set that lost every
// round answers 503 with Retry-After, which gitlab-runner retries, not 500.
func TestFailMapsEndlessConflictsToRetryableUnavailable(t *testing.T) {
	h := &Handler{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPut, "/api/v4/jobs/7", nil)
	h.fail(w, r, fmt.Errorf("update build 7: %w", builds.ErrConflict))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("got %d, Retry-After %q; want 503 with Retry-After 1", w.Code, w.Header().Get("Retry-After"))
	}
	var body struct{ Message string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Message == "" {
		t.Fatalf("body %q: want a JSON message (%v)", w.Body.String(), err)
	}
}
