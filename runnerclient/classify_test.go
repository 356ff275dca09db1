package runnerclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// replyServer answers every request with one status and set of headers.
func replyServer(t *testing.T, code int, hdr map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// deadServer is an address where nothing answers.
func deadServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	return url
}

var testJob = &Job{ID: 7, Token: "glcbt-job-token"}

// The rows of runner-wire-format.md §2.3 (createUpdateJobResult).
func TestUpdateJobClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		code       int
		hdr        map[string]string
		noResponse bool
		want       UpdateState
		cancel     bool
		interval   time.Duration
	}{
		{name: "200", code: 200, want: UpdateSucceeded},
		{name: "200 running", code: 200, hdr: map[string]string{"Job-Status": "running"}, want: UpdateSucceeded},
		{name: "202", code: 202, want: UpdateAcceptedButNotCompleted},
		{name: "202 with interval", code: 202, hdr: map[string]string{"X-GitLab-Trace-Update-Interval": "4"}, want: UpdateAcceptedButNotCompleted, interval: 4 * time.Second},
		{name: "412", code: 412, want: UpdateTraceValidationFailed},
		{name: "403", code: 403, want: UpdateAbort},
		{name: "403 with Job-Status", code: 403, hdr: map[string]string{"Job-Status": "success"}, want: UpdateAbort},
		{name: "404", code: 404, want: UpdateAbort},
		{name: "200 Job-Status canceled", code: 200, hdr: map[string]string{"Job-Status": "canceled"}, want: UpdateAbort},
		{name: "200 Job-Status failed", code: 200, hdr: map[string]string{"Job-Status": "failed"}, want: UpdateAbort},
		{name: "409 Job-Status failed", code: 409, hdr: map[string]string{"Job-Status": "failed"}, want: UpdateAbort},
		{name: "200 canceling", code: 200, hdr: map[string]string{"Job-Status": "canceling"}, want: UpdateSucceeded, cancel: true},
		{name: "409 canceling", code: 409, hdr: map[string]string{"Job-Status": "canceling"}, want: UpdateFailed, cancel: true},
		{name: "409 does not stop the runner", code: 409, want: UpdateFailed},
		{name: "400", code: 400, want: UpdateFailed},
		{name: "422", code: 422, want: UpdateFailed},
		{name: "429", code: 429, want: UpdateFailed},
		{name: "500", code: 500, want: UpdateFailed},
		{name: "503", code: 503, want: UpdateFailed},
		{name: "bad interval ignored", code: 200, hdr: map[string]string{"X-GitLab-Trace-Update-Interval": "soon"}, want: UpdateSucceeded},
		{name: "empty interval ignored", code: 202, hdr: map[string]string{"X-GitLab-Trace-Update-Interval": ""}, want: UpdateAcceptedButNotCompleted},
		{name: "no response", noResponse: true, want: UpdateAbort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var base string
			if tc.noResponse {
				base = deadServer(t)
			} else {
				base = replyServer(t, tc.code, tc.hdr).URL
			}
			c := New(base, "glrt-test-token-123456", "s_test")
			got, err := c.UpdateJob(context.Background(), testJob, StateRunning, UpdateOptions{})
			if (err != nil) != tc.noResponse {
				t.Fatalf("err = %v, want error only without a response", err)
			}
			if got.State != tc.want || got.CancelRequested != tc.cancel || got.UpdateInterval != tc.interval {
				t.Errorf("got state %v cancel %v interval %v, want %v %v %v",
					got.State, got.CancelRequested, got.UpdateInterval, tc.want, tc.cancel, tc.interval)
			}
			if !tc.noResponse && got.Code != tc.code {
				t.Errorf("Code = %d, want %d", got.Code, tc.code)
			}
			// The pure function agrees with the round trip.
			if pure := classifyUpdate(got.Code, got.Header); pure.State != got.State {
				t.Errorf("classifyUpdate = %v, round trip %v", pure.State, got.State)
			}
		})
	}
}

// The rows of runner-wire-format.md §3.5 (createPatchTraceResult), for a
// 10-byte patch at offset 5.
func TestPatchTraceClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		code       int
		hdr        map[string]string
		noResponse bool
		want       PatchState
		offset     int
		cancel     bool
		interval   time.Duration
	}{
		{name: "202 advances", code: 202, hdr: map[string]string{"Range": "0-15", "Job-Status": "running"}, want: PatchSucceeded, offset: 15},
		{name: "202 with interval", code: 202, hdr: map[string]string{"X-GitLab-Trace-Update-Interval": "60"}, want: PatchSucceeded, offset: 15, interval: time.Minute},
		{name: "202 canceling", code: 202, hdr: map[string]string{"Job-Status": "canceling"}, want: PatchSucceeded, offset: 15, cancel: true},
		{name: "202 Job-Status canceled", code: 202, hdr: map[string]string{"Job-Status": "canceled"}, want: PatchAbort, offset: 5},
		{name: "202 Job-Status failed", code: 202, hdr: map[string]string{"Job-Status": "failed"}, want: PatchAbort, offset: 5},
		{name: "403", code: 403, want: PatchAbort, offset: 5},
		{name: "403 trace too big", code: 403, hdr: map[string]string{"Job-Status": "failed"}, want: PatchAbort, offset: 5},
		{name: "404", code: 404, want: PatchNotFound, offset: 5},
		{name: "416 resend from server length", code: 416, hdr: map[string]string{"Range": "0-3"}, want: PatchRangeMismatch, offset: 3},
		{name: "416 ahead of us", code: 416, hdr: map[string]string{"Range": "0-20"}, want: PatchRangeMismatch, offset: 20},
		{name: "416 without Range resends all", code: 416, want: PatchRangeMismatch, offset: 0},
		{name: "416 canceling", code: 416, hdr: map[string]string{"Range": "0-5", "Job-Status": "canceling"}, want: PatchRangeMismatch, offset: 5, cancel: true},
		{name: "400", code: 400, want: PatchFailed, offset: 5},
		{name: "409", code: 409, want: PatchFailed, offset: 5},
		{name: "500", code: 500, want: PatchFailed, offset: 5},
		{name: "200 is not 202", code: 200, want: PatchFailed, offset: 5},
		{name: "no response retries", noResponse: true, want: PatchFailed, offset: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var base string
			if tc.noResponse {
				base = deadServer(t)
			} else {
				base = replyServer(t, tc.code, tc.hdr).URL
			}
			c := New(base, "glrt-test-token-123456", "s_test")
			got, err := c.PatchTrace(context.Background(), testJob, 5, []byte("0123456789"))
			if (err != nil) != tc.noResponse {
				t.Fatalf("err = %v, want error only without a response", err)
			}
			if got.State != tc.want || got.Offset != tc.offset || got.CancelRequested != tc.cancel || got.UpdateInterval != tc.interval {
				t.Errorf("got state %v offset %d cancel %v interval %v, want %v %d %v %v",
					got.State, got.Offset, got.CancelRequested, got.UpdateInterval, tc.want, tc.offset, tc.cancel, tc.interval)
			}
			if !tc.noResponse {
				if pure := classifyPatch(got.Code, got.Header, 5, 15); pure.State != got.State || pure.Offset != got.Offset {
					t.Errorf("classifyPatch = %v@%d, round trip %v@%d", pure.State, pure.Offset, got.State, got.Offset)
				}
			}
		})
	}
}

func TestPatchTraceEmptySendsNothing(t *testing.T) {
	t.Parallel()
	c := New(deadServer(t), "glrt-test-token-123456", "")
	got, err := c.PatchTrace(context.Background(), testJob, 42, nil)
	if err != nil || got.State != PatchSucceeded || got.Offset != 42 {
		t.Errorf("empty patch = %+v, %v; want succeeded at 42 without a request", got, err)
	}
}

func TestContentRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		start, n int
		want     string
	}{
		{0, 1, "0-0"},
		{0, 5, "0-4"},
		{5, 10, "5-14"},
		{1 << 20, 1 << 20, "1048576-2097151"},
	}
	for _, tc := range tests {
		if got := contentRange(tc.start, tc.n); got != tc.want {
			t.Errorf("contentRange(%d, %d) = %q, want %q", tc.start, tc.n, got, tc.want)
		}
	}
}

func TestRangeEnd(t *testing.T) {
	t.Parallel()
	tests := map[string]int{"0-12": 12, "0-0": 0, "": 0, "12": 0, "0-x": 0, "1-2-3": 0}
	for in, want := range tests {
		if got := rangeEnd(in); got != want {
			t.Errorf("rangeEnd(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestMapFailureReason(t *testing.T) {
	t.Parallel()
	listed := []string{"script_failure", "job_canceled", "unknown_failure"}
	tests := []struct {
		reason    string
		supported []string
		want      string
	}{
		{"", nil, "script_failure"},
		{"script_failure", nil, "script_failure"},
		{"runner_system_failure", nil, "runner_system_failure"},
		{"job_execution_timeout", nil, "job_execution_timeout"},
		{"job_canceled", listed, "job_canceled"},
		{"job_canceled", nil, "unknown_failure"},
		{"image_pull_failure", nil, "runner_system_failure"},
		{"image_pull_failure", []string{"image_pull_failure"}, "image_pull_failure"},
		{"runner_configuration_error", nil, "script_failure"},
		{"job_aborted", listed, "unknown_failure"},
	}
	for _, tc := range tests {
		if got := mapFailureReason(tc.reason, tc.supported); got != tc.want {
			t.Errorf("mapFailureReason(%q, %v) = %q, want %q", tc.reason, tc.supported, got, tc.want)
		}
	}
}
