package tracetest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

func TestPatchTrace(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, job := inst.LegacyJob(t, nil)
	tracePath := fmt.Sprintf("/api/v4/projects/7/jobs/%d/trace", job.ID)

	// Content-Range is inclusive: "0-5" carries 6 bytes.
	resp, b := jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, []byte("hello\n"))
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	if got := resp.Header.Get("Range"); got != "0-6" {
		t.Errorf("Range %q, want 0-6", got)
	}
	jobapitest.WantJobStatus(t, resp, "running")
	if got := resp.Header.Get("X-GitLab-Trace-Update-Interval"); got != "30" {
		t.Errorf("X-GitLab-Trace-Update-Interval %q, want 30 while nobody watches", got)
	}

	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 6, []byte("world\n"))
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	if got := resp.Header.Get("Range"); got != "0-12" {
		t.Errorf("Range %q, want 0-12", got)
	}

	// A patch that does not start at the stored length: 416 with the stored length.
	for _, start := range []int{0, 6, 13, 100} {
		resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, start, []byte("again\n"))
		jobapitest.WantJSONError(t, resp, b, http.StatusRequestedRangeNotSatisfiable)
		if got := resp.Header.Get("Range"); got != "0-12" {
			t.Errorf("start %d: Range %q, want 0-12", start, got)
		}
	}

	// Missing or malformed Content-Range, or one that disagrees with the body: 400.
	for name, cr := range map[string]string{"missing": "", "garbage": "bytes=0-5", "reversed": "20-3",
		"exclusive end": "12-18", "negative": "-1-4"} {
		hdr := []string{"JOB-TOKEN", job.Token, "Content-Type", "text/plain"}
		if cr != "" {
			hdr = append(hdr, "Content-Range", cr)
		}
		resp, b = jobapitest.Send(t, inst.URL, "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", job.ID), "abcdef", hdr...)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("Content-Range %s (%q): %d %s, want 400", name, cr, resp.StatusCode, b)
		}
	}
	// Wrong token: 403, nothing appended.
	resp, b = jobapitest.Send(t, inst.URL, "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", job.ID), "xx",
		"JOB-TOKEN", "glcbt-wrong", "Content-Range", "12-13")
	jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)

	// The stored log, as text.
	resp, b = inst.Do(t, "GET", tracePath, nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("trace Content-Type %q, want text/plain", ct)
	}
	if string(b) != "hello\nworld\n" {
		t.Errorf("trace %q", b)
	}
	if d := inst.Job(t, 7, job.ID); d.TraceSize != 12 {
		t.Errorf("trace_size %d, want 12", d.TraceSize)
	}

	// Someone read the log: the runner is asked to send every 3 s.
	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 12, []byte("!"))
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	if got := resp.Header.Get("X-GitLab-Trace-Update-Interval"); got != "3" {
		t.Errorf("X-GitLab-Trace-Update-Interval %q after a read, want 3", got)
	}

	// An empty patch at the end appends nothing and must not block the next real one.
	resp, b = jobapitest.Send(t, inst.URL, "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", job.ID), "",
		"JOB-TOKEN", job.Token, "Content-Range", "13-12")
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Range") != "0-13" {
		t.Errorf("empty patch: %d Range %q %s, want 202 0-13", resp.StatusCode, resp.Header.Get("Range"), b)
	}
	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 13, []byte("?\n"))
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	if got := resp.Header.Get("Range"); got != "0-15" {
		t.Errorf("Range %q after the empty patch, want 0-15", got)
	}

	jobapitest.FinishJob(t, inst.URL, job, "success", "", 0)
	resp, b = inst.Do(t, "GET", tracePath, nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if string(b) != "hello\nworld\n!?\n" {
		t.Errorf("final trace %q", b)
	}
}

// TestTraceLimit: beyond JOBAPI_TRACE_LIMIT (plus the slack that lets a runner with the same
// output_limit append its own notice) the job is dropped with trace_size_exceeded.
func TestTraceLimit(t *testing.T) {
	t.Parallel()
	cfg, err := server.LoadConfig(func(k string) string {
		if k == "JOBAPI_TRACE_LIMIT" {
			return "1KiB"
		}
		return ""
	})
	if err != nil || cfg.TraceLimit != 1024 {
		t.Fatalf("JOBAPI_TRACE_LIMIT=1KiB: %v, %d", err, cfg.TraceLimit)
	}
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.TraceLimit = cfg.TraceLimit }})
	p, job := inst.LegacyJob(t, nil)

	resp, b := jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, bytes.Repeat([]byte("a"), 1000))
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	big := bytes.Repeat([]byte("b"), 100<<10) // far past 1 KiB and any slack
	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 1000, big)
	jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
	jobapitest.WantJobStatus(t, resp, "failed")

	d := inst.Job(t, 7, job.ID)
	if d.Status != "failed" || d.FailureReason == nil || *d.FailureReason != "trace_size_exceeded" {
		t.Fatalf("job after an oversized trace: %s %v", d.Status, d.FailureReason)
	}
	if d.TraceSize != 1000 {
		t.Errorf("trace_size %d, want the 1000 bytes stored before", d.TraceSize)
	}
	if st := inst.Pipeline(t, p).Status; st != "failed" {
		t.Errorf("pipeline %s, want failed", st)
	}
	if ev := jobapitest.EventTypes(inst.Events(t, 7, job.ID)); !strings.Contains(ev, "trace_size_exceeded") {
		t.Errorf("events %s, want trace_size_exceeded", ev)
	}
	// The runner's next calls are refused with Job-Status failed: it aborts.
	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 1000, []byte("more"))
	jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
	jobapitest.WantJobStatus(t, resp, "failed")
	resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "success"})
	jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
	jobapitest.WantJobStatus(t, resp, "failed")
}
