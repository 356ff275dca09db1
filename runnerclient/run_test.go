package runnerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// coordinator is a fake server for one job: PUT answers 200 and PATCH
// follows GitLab's append rule (416 unless the patch starts at the stored
// length), unless a test hook says otherwise. Hooks run under co.mu.
type coordinator struct {
	mu          sync.Mutex
	trace       []byte
	updates     []map[string]any // PUT bodies, in order
	patchStarts []int
	patchSizes  []int

	// onUpdate answers the n-th PUT (0 is the ack); code 0 means 200.
	onUpdate func(n int, body map[string]any) (code int, hdr map[string]string)
	// onPatch answers the n-th PATCH; code 0 means GitLab's rule, with hdr added.
	onPatch func(n, start int) (code int, hdr map[string]string)
}

func (co *coordinator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	co.mu.Lock()
	defer co.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	set := func(hdr map[string]string) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
	}
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/api/v4/jobs/1":
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := len(co.updates)
		co.updates = append(co.updates, m)
		code, hdr := 0, map[string]string{"Job-Status": "running"}
		if co.onUpdate != nil {
			if c, h := co.onUpdate(n, m); c != 0 || h != nil {
				code, hdr = c, h
			}
		}
		set(hdr)
		if code == 0 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
	case r.Method == http.MethodPatch && r.URL.Path == "/api/v4/jobs/1/trace":
		startStr, _, _ := strings.Cut(r.Header.Get("Content-Range"), "-")
		start, err := strconv.Atoi(startStr)
		if err != nil {
			http.Error(w, "bad Content-Range", http.StatusBadRequest)
			return
		}
		n := len(co.patchStarts)
		co.patchStarts = append(co.patchStarts, start)
		co.patchSizes = append(co.patchSizes, len(body))
		var code int
		if co.onPatch != nil {
			var hdr map[string]string
			code, hdr = co.onPatch(n, start)
			set(hdr)
		}
		if code == 0 {
			code = http.StatusAccepted
			if start == len(co.trace) {
				co.trace = append(co.trace, body...)
			} else {
				code = http.StatusRequestedRangeNotSatisfiable
			}
			w.Header().Set("Range", fmt.Sprintf("0-%d", len(co.trace)))
			if w.Header().Get("Job-Status") == "" {
				w.Header().Set("Job-Status", "running")
			}
		}
		w.WriteHeader(code)
	default:
		http.NotFound(w, r)
	}
}

// finals are the PUTs with a final state.
func (co *coordinator) finals() []map[string]any {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.finalsLocked()
}

func (co *coordinator) finalsLocked() []map[string]any {
	var out []map[string]any
	for _, u := range co.updates {
		if u["state"] == StateSuccess || u["state"] == StateFailed {
			out = append(out, u)
		}
	}
	return out
}

func (co *coordinator) counts() (updates, patches int) {
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.updates), len(co.patchStarts)
}

func (co *coordinator) storedTrace() string {
	co.mu.Lock()
	defer co.mu.Unlock()
	return string(co.trace)
}

func startCoordinator(t *testing.T, co *coordinator) *Client {
	t.Helper()
	srv := httptest.NewServer(co)
	t.Cleanup(srv.Close)
	c := New(srv.URL, testRunnerToken, "s_test")
	c.MaxWait = 5 * time.Millisecond
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func newTestJob(script, afterScript []string) *Job {
	steps := []Step{{Name: "script", Script: script, Timeout: 3600, When: "on_success"}}
	if afterScript != nil {
		steps = append(steps, Step{Name: "after_script", Script: afterScript, Timeout: 3600, When: "always", AllowFailure: true})
	}
	return &Job{
		ID:         1,
		Token:      "glcbt-job-1",
		RunnerInfo: RunnerInfo{Timeout: 3600},
		Steps:      steps,
		Features:   GitlabFeatures{FailureReasons: []string{"script_failure", "job_canceled"}},
	}
}

func runCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func crc(s string) string { return fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE([]byte(s))) }

func TestRunJobSucceeds(t *testing.T) {
	t.Parallel()
	co := &coordinator{}
	c := startCoordinator(t, co)
	job := newTestJob([]string{"echo hello", "make"}, []string{"echo bye"})

	out, err := c.RunJob(runCtx(t), job, FakeShell{})
	if err != nil {
		t.Fatal(err)
	}
	want := "$ echo hello\nhello\n$ make\nok: make\n$ echo bye\nbye\nJob succeeded\n"
	if out.Result != Succeeded || out.FinalCode != 200 || out.FinalState != UpdateSucceeded || out.FinalUpdates != 1 || out.AckCode != 200 {
		t.Errorf("outcome = %+v", out)
	}
	if string(out.Trace) != want || co.storedTrace() != want {
		t.Errorf("trace = %q, server has %q, want %q", out.Trace, co.storedTrace(), want)
	}

	co.mu.Lock()
	ack := co.updates[0]
	co.mu.Unlock()
	if ack["state"] != "running" || ack["token"] != "glcbt-job-1" || len(ack["output"].(map[string]any)) != 0 {
		t.Errorf("ack = %v", ack)
	}
	finals := co.finals()
	if len(finals) != 1 {
		t.Fatalf("%d final updates", len(finals))
	}
	f := finals[0]
	output := f["output"].(map[string]any)
	if f["state"] != "success" || output["checksum"] != crc(want) || output["bytesize"] != float64(len(want)) || f["checksum"] != crc(want) {
		t.Errorf("final update = %v, want checksum %s bytesize %d", f, crc(want), len(want))
	}
	for _, k := range []string{"exit_code", "failure_reason"} {
		if _, ok := f[k]; ok {
			t.Errorf("success update has %s", k)
		}
	}
}

func TestRunJobScriptFailure(t *testing.T) {
	t.Parallel()
	co := &coordinator{}
	c := startCoordinator(t, co)
	job := newTestJob([]string{"echo a", "exit 3", "echo never"}, []string{"echo after"})

	out, err := c.RunJob(runCtx(t), job, FakeShell{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != Failed || out.State != "failed" || out.FailureReason != "script_failure" || out.ExitCode != 3 {
		t.Errorf("outcome = %+v", out)
	}
	trace := string(out.Trace)
	if strings.Contains(trace, "never") || !strings.Contains(trace, "$ echo after\nafter\n") || !strings.HasSuffix(trace, "ERROR: Job failed: exit code 3\n") {
		t.Errorf("trace = %q", trace)
	}
	f := co.finals()[0]
	if f["state"] != "failed" || f["failure_reason"] != "script_failure" || f["exit_code"] != 3.0 {
		t.Errorf("final update = %v", f)
	}
}

// The ack rows of runner-wire-format.md §2.3: only UpdateAbort drops the job.
func TestRunJobAck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		code    int
		hdr     map[string]string
		reasons []string
		want    Result
		reason  string
	}{
		{name: "403 drops", code: 403, want: Dropped},
		{name: "403 Job-Status canceled drops", code: 403, hdr: map[string]string{"Job-Status": "canceled"}, want: Dropped},
		{name: "404 drops", code: 404, want: Dropped},
		{name: "200 Job-Status failed drops", code: 200, hdr: map[string]string{"Job-Status": "failed"}, want: Dropped},
		{name: "409 runs anyway", code: 409, want: Succeeded},
		{name: "500 runs anyway", code: 500, want: Succeeded},
		{name: "202 runs", code: 202, want: Succeeded},
		{name: "canceling fails the job", code: 200, hdr: map[string]string{"Job-Status": "canceling"}, want: Canceled, reason: "job_canceled"},
		{name: "canceling, reason not listed", code: 200, hdr: map[string]string{"Job-Status": "canceling"}, reasons: []string{}, want: Canceled, reason: "unknown_failure"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			co := &coordinator{onUpdate: func(n int, _ map[string]any) (int, map[string]string) {
				if n == 0 {
					return tc.code, tc.hdr
				}
				return 0, nil
			}}
			c := startCoordinator(t, co)
			job := newTestJob([]string{"echo hi"}, nil)
			if tc.reasons != nil {
				job.Features.FailureReasons = tc.reasons
			}
			out, err := c.RunJob(runCtx(t), job, FakeShell{})
			if err != nil {
				t.Fatal(err)
			}
			if out.Result != tc.want || out.AckCode != tc.code {
				t.Errorf("outcome = %+v, want %v", out, tc.want)
			}
			updates, patches := co.counts()
			switch tc.want {
			case Dropped:
				if updates != 1 || patches != 0 || out.FinalUpdates != 0 {
					t.Errorf("dropped job sent %d updates, %d patches", updates, patches)
				}
			case Canceled:
				f := co.finals()
				if patches != 0 || len(f) != 1 || f[0]["failure_reason"] != tc.reason || len(out.Trace) != 0 {
					t.Errorf("canceled at ack: %d patches, finals %v, trace %q", patches, f, out.Trace)
				}
			}
		})
	}
}

func TestRunJobAckNoResponse(t *testing.T) {
	t.Parallel()
	c := New(deadServer(t), testRunnerToken, "")
	out, err := c.RunJob(runCtx(t), newTestJob([]string{"echo hi"}, nil), FakeShell{})
	if err == nil || out.Result != Dropped {
		t.Errorf("RunJob = %+v, %v; want dropped with an error", out, err)
	}
}

// A graceful cancel stops the script, runs after_script, and fails the job
// with job_canceled, whether it comes on a PATCH or on a touch.
func TestRunJobCancelWhileRunning(t *testing.T) {
	t.Parallel()
	canceling := map[string]string{"Job-Status": "canceling"}
	tests := []struct {
		name     string
		onPatch  func(n, start int) (int, map[string]string)
		onUpdate func(n int, body map[string]any) (int, map[string]string)
	}{
		{name: "on patch", onPatch: func(int, int) (int, map[string]string) { return 0, canceling }},
		{name: "on touch", onUpdate: func(n int, body map[string]any) (int, map[string]string) {
			if n > 0 && body["state"] == "running" {
				return 200, canceling
			}
			return 0, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			co := &coordinator{onPatch: tc.onPatch, onUpdate: tc.onUpdate}
			c := startCoordinator(t, co)
			job := newTestJob([]string{"echo start", "sleep 30s", "echo never"}, []string{"echo cleanup"})

			began := time.Now()
			out, err := c.RunJob(runCtx(t), job, FakeShell{})
			if err != nil {
				t.Fatal(err)
			}
			if elapsed := time.Since(began); elapsed > 10*time.Second {
				t.Errorf("cancel took %v", elapsed)
			}
			trace := string(out.Trace)
			if out.Result != Canceled || out.FailureReason != "job_canceled" || out.FinalState != UpdateSucceeded {
				t.Errorf("outcome = %+v", out)
			}
			if strings.Contains(trace, "never") || !strings.Contains(trace, "cleanup\n") || co.storedTrace() != trace {
				t.Errorf("trace = %q, server has %q", trace, co.storedTrace())
			}
			if tc.onUpdate != nil && out.Touches == 0 {
				t.Errorf("canceled by touch without a touch")
			}
		})
	}
}

// A hard abort (403, Job-Status failed/canceled) stops everything, skips
// after_script, and the final update the runner still sends is refused.
func TestRunJobAbortWhileRunning(t *testing.T) {
	t.Parallel()
	refuseFinal := func(n int, body map[string]any) (int, map[string]string) {
		if body["state"] == "failed" {
			return 403, map[string]string{"Job-Status": "failed"}
		}
		return 0, nil
	}
	tests := []struct {
		name     string
		onPatch  func(n, start int) (int, map[string]string)
		onUpdate func(n int, body map[string]any) (int, map[string]string)
	}{
		{name: "patch 403", onPatch: func(int, int) (int, map[string]string) { return 403, nil }, onUpdate: refuseFinal},
		{name: "patch Job-Status failed", onPatch: func(int, int) (int, map[string]string) { return 0, map[string]string{"Job-Status": "failed"} }, onUpdate: refuseFinal},
		{name: "touch 403", onUpdate: func(n int, body map[string]any) (int, map[string]string) {
			if n > 0 {
				return 403, nil
			}
			return 0, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			co := &coordinator{onPatch: tc.onPatch, onUpdate: tc.onUpdate}
			c := startCoordinator(t, co)
			job := newTestJob([]string{"echo start", "sleep 30s"}, []string{"echo cleanup"})

			out, err := c.RunJob(runCtx(t), job, FakeShell{})
			if err != nil {
				t.Fatal(err)
			}
			if out.Result != Aborted || out.FinalState != UpdateAbort || out.FinalCode != 403 || out.FinalUpdates != 1 {
				t.Errorf("outcome = %+v", out)
			}
			if strings.Contains(string(out.Trace), "cleanup") {
				t.Errorf("after_script ran after an abort: %q", out.Trace)
			}
		})
	}
}

func TestRunJobFinalUpdateRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		codes       []int // answers to the final updates; the last one repeats
		wantUpdates int
		wantState   UpdateState
		wantErr     bool
	}{
		{name: "202 then 200", codes: []int{202, 202, 200}, wantUpdates: 3, wantState: UpdateSucceeded},
		{name: "409 is retried", codes: []int{409, 200}, wantUpdates: 2, wantState: UpdateSucceeded},
		{name: "403 gives up quietly", codes: []int{403}, wantUpdates: 1, wantState: UpdateAbort},
		{name: "404 gives up quietly", codes: []int{404}, wantUpdates: 1, wantState: UpdateAbort},
		{name: "500 until the retry limit", codes: []int{500}, wantUpdates: 10, wantState: UpdateFailed, wantErr: true},
		{name: "202 does not count towards the limit", codes: []int{202, 202, 202, 202, 202, 202, 202, 202, 202, 202, 202, 200}, wantUpdates: 12, wantState: UpdateSucceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			finals := 0
			co := &coordinator{onUpdate: func(n int, body map[string]any) (int, map[string]string) {
				if body["state"] != "success" {
					return 0, nil
				}
				code := tc.codes[min(finals, len(tc.codes)-1)]
				finals++
				return code, map[string]string{"X-GitLab-Trace-Update-Interval": "1"}
			}}
			c := startCoordinator(t, co)
			out, err := c.RunJob(runCtx(t), newTestJob([]string{"echo hi"}, nil), FakeShell{})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if out.FinalUpdates != tc.wantUpdates || out.FinalState != tc.wantState || out.Result != Succeeded {
				t.Errorf("outcome = %+v", out)
			}
		})
	}
}

// 412 on the final update makes the runner send the whole log again.
func TestRunJobFinalUpdateTraceValidationFailed(t *testing.T) {
	t.Parallel()
	var co *coordinator
	co = &coordinator{onUpdate: func(n int, body map[string]any) (int, map[string]string) {
		if body["state"] == "success" && len(co.finalsLocked()) == 1 {
			co.trace = nil // the server lost its copy
			return 412, nil
		}
		return 0, nil
	}}
	c := startCoordinator(t, co)
	out, err := c.RunJob(runCtx(t), newTestJob([]string{"echo hi"}, nil), FakeShell{})
	if err != nil {
		t.Fatal(err)
	}
	if out.FinalUpdates != 2 || out.FinalState != UpdateSucceeded || co.storedTrace() != string(out.Trace) {
		t.Errorf("outcome = %+v, server trace %q", out, co.storedTrace())
	}
	co.mu.Lock()
	starts := co.patchStarts
	co.mu.Unlock()
	if len(starts) < 2 || starts[len(starts)-1] != 0 {
		t.Errorf("patch starts = %v, want the log resent from 0", starts)
	}
}

// On 416 the runner resends from the length in Range.
func TestRunJobRangeMismatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		serverHas  int // bytes of the log the server claims on the first patch
		wantStarts []int
	}{
		{name: "server has nothing", serverHas: 0, wantStarts: []int{0, 0}},
		{name: "server has a prefix", serverHas: 5, wantStarts: []int{0, 5}},
	}
	const want = "$ echo hello\nhello\nJob succeeded\n"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var co *coordinator
			co = &coordinator{onPatch: func(n, start int) (int, map[string]string) {
				if n == 0 {
					co.trace = []byte(want[:tc.serverHas])
					return 416, map[string]string{"Range": fmt.Sprintf("0-%d", tc.serverHas)}
				}
				return 0, nil
			}}
			c := startCoordinator(t, co)
			out, err := c.RunJob(runCtx(t), newTestJob([]string{"echo hello"}, nil), FakeShell{})
			if err != nil {
				t.Fatal(err)
			}
			co.mu.Lock()
			starts := co.patchStarts
			co.mu.Unlock()
			// Later patches depend on timing; the first two do not.
			if string(out.Trace) != want || co.storedTrace() != want || len(starts) < 2 ||
				fmt.Sprint(starts[:2]) != fmt.Sprint(tc.wantStarts) {
				t.Errorf("trace %q, server %q, patch starts %v (want %v first)", out.Trace, co.storedTrace(), starts, tc.wantStarts)
			}
		})
	}
}

type execFunc func(ctx context.Context, job *Job, step Step, out io.Writer) error

func (f execFunc) Run(ctx context.Context, job *Job, step Step, out io.Writer) error {
	return f(ctx, job, step, out)
}

func TestRunJobLargeLogIsPatchedInChunks(t *testing.T) {
	t.Parallel()
	co := &coordinator{}
	c := startCoordinator(t, co)
	big := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/32) // 2.5 MiB
	exec := execFunc(func(_ context.Context, _ *Job, _ Step, out io.Writer) error {
		_, err := out.Write(big)
		return err
	})
	out, err := c.RunJob(runCtx(t), newTestJob([]string{"x"}, nil), exec)
	if err != nil {
		t.Fatal(err)
	}
	if co.storedTrace() != string(out.Trace) || !bytes.HasPrefix(out.Trace, big) {
		t.Errorf("server has %d bytes, client %d", len(co.storedTrace()), len(out.Trace))
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	for i, n := range co.patchSizes {
		if n > 1<<20 {
			t.Errorf("patch %d at %d is %d bytes, over 1 MiB", i, co.patchStarts[i], n)
		}
	}
	if len(co.patchStarts) < 3 {
		t.Errorf("patch starts = %v, want at least 3 patches", co.patchStarts)
	}
}

func TestRunJobTimeout(t *testing.T) {
	t.Parallel()
	co := &coordinator{}
	c := startCoordinator(t, co)
	job := newTestJob([]string{"sleep 30s"}, []string{"echo cleanup"})
	job.RunnerInfo.Timeout = 1

	out, err := c.RunJob(runCtx(t), job, FakeShell{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != Failed || out.FailureReason != "job_execution_timeout" || !strings.Contains(string(out.Trace), "cleanup\n") {
		t.Errorf("outcome = %+v, trace %q", out, out.Trace)
	}
}

func TestRunJobTouchesWhenQuiet(t *testing.T) {
	t.Parallel()
	co := &coordinator{}
	c := startCoordinator(t, co)
	out, err := c.RunJob(runCtx(t), newTestJob([]string{"sleep 300ms"}, nil), FakeShell{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Touches == 0 {
		t.Fatalf("no keep-alive touch in 300 ms of silence (MaxWait 5 ms)")
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	touch := co.updates[1]
	if touch["state"] != "running" || touch["output"].(map[string]any)["checksum"] == nil {
		t.Errorf("touch = %v, want state running with the log checksum", touch)
	}
}

func TestTraceOutputLimit(t *testing.T) {
	t.Parallel()
	tr := &jobTrace{}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 5 {
		if n, err := tr.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	got := tr.bytes()
	notice := fmt.Sprintf("\n\x1b[31;1mJob's log exceeded limit of %d bytes.\x1b[0;m\n", 4<<20)
	if len(got) != 4<<20+1+len(notice) || !bytes.HasSuffix(got, []byte(notice)) {
		t.Errorf("log is %d bytes, ends %q", len(got), got[max(0, len(got)-80):])
	}
}

func TestFakeShell(t *testing.T) {
	t.Parallel()
	tests := []struct {
		script  []string
		want    string
		wantErr error
	}{
		{[]string{"echo hi there"}, "$ echo hi there\nhi there\n", nil},
		{[]string{"make all"}, "$ make all\nok: make all\n", nil},
		{[]string{"exit 0", "echo no"}, "$ exit 0\n", nil},
		{[]string{"exit", "echo no"}, "$ exit\n", nil},
		{[]string{"exit 7", "echo no"}, "$ exit 7\n", &ExitError{Code: 7}},
		{[]string{"exit x"}, "$ exit x\n", &ExitError{Code: 1}},
		{[]string{"sleep 1ms", "sleep 0.001"}, "$ sleep 1ms\n$ sleep 0.001\n", nil},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		err := FakeShell{}.Run(context.Background(), nil, Step{Name: "script", Script: tc.script}, &buf)
		if buf.String() != tc.want || fmt.Sprint(err) != fmt.Sprint(tc.wantErr) {
			t.Errorf("%v: wrote %q, %v; want %q, %v", tc.script, buf.String(), err, tc.want, tc.wantErr)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (FakeShell{}).Run(ctx, nil, Step{Script: []string{"sleep 1h"}}, io.Discard); err != context.Canceled {
		t.Errorf("canceled sleep = %v", err)
	}
}
