package handlers

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/gitref"
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

// TestFailShedsWithRetryAfter: a job request shed under overload is a 503 with the
// service's Retry-After, which gitlab-runner's transport waits out before it retries
// (and a 503 leaves the runner healthy), never a 4xx or a bare 503.
func TestFailShedsWithRetryAfter(t *testing.T) {
	h := &Handler{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := httptest.NewRecorder()
	h.fail(w, httptest.NewRequest(http.MethodPost, "/api/v4/jobs/request", nil),
		&claimpacing.OverloadError{RetryAfter: 3 * time.Second, What: "test"})
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "3" {
		t.Fatalf("got %d, Retry-After %q; want 503 with Retry-After 3", w.Code, w.Header().Get("Retry-After"))
	}
	var body struct{ Message string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Message == "" {
		t.Fatalf("body %q: want a JSON message (%v)", w.Body.String(), err)
	}
}

// TestFailMapsStoreOutagesToRetryableUnavailable: a store down, restarting or out of
// connection slots (pgstore marks those builds.ErrUnavailable) is a 503 with Retry-After
// (clients retry); any other failure of the store is a 500. NUL in text is the client's 400.
func TestFailMapsStoreOutagesToRetryableUnavailable(t *testing.T) {
	h := &Handler{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tt := range []struct {
		err  error
		want int
	}{
		{builds.ErrUnavailable, http.StatusServiceUnavailable},
		{&builds.ConstraintError{Kind: builds.Unique, Name: "runners_pkey"}, http.StatusInternalServerError},
		{&builds.ConstraintError{Kind: builds.ForeignKey}, http.StatusInternalServerError},
		{builds.ErrContention, http.StatusInternalServerError},
		{builds.ErrNULCharacter, http.StatusBadRequest},
	} {
		w := httptest.NewRecorder()
		h.fail(w, httptest.NewRequest(http.MethodPost, "/api/v4/user/runners", nil), fmt.Errorf("create runner: %w", tt.err))
		if w.Code != tt.want || (tt.want == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "") {
			t.Errorf("%v: got %d, Retry-After %q; want %d", tt.err, w.Code, w.Header().Get("Retry-After"), tt.want)
		}
	}
}

// TestJobForbiddenWireText pins the 403 texts and Job-Status of refused job calls: the
// domain error carries the cause and state, and these words are what runners have read.
func TestJobForbiddenWireText(t *testing.T) {
	h := &Handler{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tests := []struct {
		err        *builds.JobForbiddenError
		wantMsg    string
		wantStatus string
	}{
		{&builds.JobForbiddenError{Cause: builds.InvalidJobToken}, "403 Forbidden - invalid job token", ""},
		{&builds.JobForbiddenError{Cause: builds.NotProcessing, Status: builds.StatusFailed},
			"403 Forbidden - job is not processing on runner (status failed)", "failed"},
		{&builds.JobForbiddenError{Cause: builds.ProvisioningTimedOut, Status: builds.StatusWaiting},
			"403 Forbidden - provisioning took longer than the maximum wait", "waiting_for_runner_ack"},
		{&builds.JobForbiddenError{Cause: builds.NotRunning, Status: builds.StatusCanceled},
			"403 Forbidden - job is not running (status canceled)", "canceled"},
		{&builds.JobForbiddenError{Cause: builds.TraceTooLarge, Status: builds.StatusFailed},
			"403 Forbidden - trace size exceeded", "failed"},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		h.fail(w, httptest.NewRequest(http.MethodPut, "/api/v4/jobs/7", nil), fmt.Errorf("update build 7: %w", tt.err))
		var body struct{ Message string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("body %q: %v", w.Body.String(), err)
		}
		if w.Code != http.StatusForbidden || body.Message != tt.wantMsg || w.Header().Get("Job-Status") != tt.wantStatus {
			t.Errorf("%v: got %d %q Job-Status %q; want 403 %q Job-Status %q", tt.err, w.Code, body.Message,
				w.Header().Get("Job-Status"), tt.wantMsg, tt.wantStatus)
		}
	}
	w := httptest.NewRecorder()
	h.fail(w, httptest.NewRequest(http.MethodPost, "/api/v4/jobs/request", nil), builds.ErrRunnerForbidden)
	if w.Code != http.StatusForbidden || w.Body.String() != `{"message":"403 Forbidden"}`+"\n" {
		t.Errorf("unknown runner token: got %d %q; want 403 with message 403 Forbidden", w.Code, w.Body.String())
	}
}

// TestFailAnswersRefusedRefsWith400: a ref or commit id gitref refuses is the client's 400
// with gitref's words, as a builds.ValidationError is.
func TestFailAnswersRefusedRefsWith400(t *testing.T) {
	h := &Handler{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, err := range []error{gitref.CheckName("ref_name", "--upload-pack=x"), gitref.CheckSHA("sha", "HEAD")} {
		w := httptest.NewRecorder()
		h.fail(w, httptest.NewRequest(http.MethodGet, "/api/v4/projects/1/repository/commits/HEAD/statuses", nil), err)
		var body struct{ Message string }
		if jerr := json.Unmarshal(w.Body.Bytes(), &body); w.Code != http.StatusBadRequest || jerr != nil || body.Message != err.Error() {
			t.Errorf("%v: got %d %q; want 400 with its message", err, w.Code, w.Body.String())
		}
	}
}
