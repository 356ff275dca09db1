package jobapitest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
)

// Runner is a runnerclient.Client whose calls fail the test they are given on a transport
// error and, where their comment says so, on any answer but the one they require. What an
// answer means for the test stays in the test. The test is an argument, not a field, so
// that subtests and their goroutines can share a runner and still fail themselves.
type Runner struct {
	*runnerclient.Client
}

// NewRunner plays gitlab-runner (runnerclient's defaults, one-phase) for a registered
// runner's token as manager systemID. Its waits are capped at 10 ms so that a test does not
// sleep through trace periods; idle connections are closed when the test ends.
func NewRunner(t testing.TB, baseURL, token, systemID string) *Runner {
	c := runnerclient.New(baseURL, token, systemID)
	c.MaxWait = 10 * time.Millisecond
	t.Cleanup(c.CloseIdleConnections)
	return &Runner{Client: c}
}

// NewRunner registers a runner for tags (untagged jobs only when there are none) and plays
// it as a new manager of its own.
func (i *Instance) NewRunner(t testing.TB, tags ...string) *Runner {
	t.Helper()
	_, token := i.CreateRunner(t, tags...)
	return NewRunner(t, i.URL, token, "s_"+randomHex(6))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Take asks for a job and requires one (201).
func (r *Runner) Take(t testing.TB) *runnerclient.Job {
	t.Helper()
	job, res, err := r.RequestJob(context.Background())
	if err != nil || res.Code != http.StatusCreated || job == nil {
		t.Fatalf("request job: status %d (%s), err %v; want 201 with a job", res.Code, res.Message, err)
	}
	return job
}

// TakeNamed takes the next job and requires it to be the named one.
func (r *Runner) TakeNamed(t testing.TB, name string) *runnerclient.Job {
	t.Helper()
	j := r.Take(t)
	if j.JobInfo.Name != name {
		t.Fatalf("took job %q (id %d), want %q", j.JobInfo.Name, j.ID, name)
	}
	return j
}

// TakeAll takes n jobs and returns them by name.
func (r *Runner) TakeAll(t testing.TB, n int) map[string]*runnerclient.Job {
	t.Helper()
	out := map[string]*runnerclient.Job{}
	for range n {
		j := r.Take(t)
		out[j.JobInfo.Name] = j
	}
	return out
}

// TakeWithin polls for a job until one is assigned (201), answers 204 meanwhile being
// expected: a build queued by a background worker becomes visible a moment after its commit.
func (r *Runner) TakeWithin(t testing.TB, timeout time.Duration) *runnerclient.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		job, res, err := r.RequestJob(context.Background())
		if err != nil {
			t.Fatalf("request job: %v", err)
		}
		switch {
		case res.Code == http.StatusCreated:
			return job
		case res.Code != http.StatusNoContent:
			t.Fatalf("request job: %d %s, want 201 or 204", res.Code, res.Message)
		case time.Now().After(deadline):
			t.Fatalf("no job assigned within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NoJob asks for a job and requires none (204).
func (r *Runner) NoJob(t testing.TB) {
	t.Helper()
	job, res, err := r.RequestJob(context.Background())
	if err != nil || job != nil || res.Code != http.StatusNoContent {
		name, id := "", int64(0)
		if job != nil {
			name, id = job.JobInfo.Name, job.ID
		}
		t.Fatalf("request job: status %d, job %q (id %d), err %v; want 204", res.Code, name, id, err)
	}
}

// Put sends PUT /jobs/:id with state and returns the answer, whatever its status.
func (r *Runner) Put(t testing.TB, job *runnerclient.Job, state string, opts runnerclient.UpdateOptions) runnerclient.UpdateResult {
	t.Helper()
	res, err := r.UpdateJob(context.Background(), job, state, opts)
	if err != nil {
		t.Fatalf("PUT job %d state=%s: %v", job.ID, state, err)
	}
	return res
}

// Patch sends data as the trace PATCH at offset and returns the answer, whatever its status.
func (r *Runner) Patch(t testing.TB, job *runnerclient.Job, offset int, data string) runnerclient.PatchResult {
	t.Helper()
	res, err := r.PatchTrace(context.Background(), job, offset, []byte(data))
	if err != nil {
		t.Fatalf("PATCH trace of job %d at %d: %v", job.ID, offset, err)
	}
	return res
}

// Finish sends the final update (exit code 1 when failed) and requires the server to take
// it: 200 with Job-Status success, or for a failure failed or canceled (gitlab-runner reads
// those as "stop", which after its final update is what it does anyway).
func (r *Runner) Finish(t testing.TB, job *runnerclient.Job, state, reason string) {
	t.Helper()
	opts := runnerclient.UpdateOptions{FailureReason: reason}
	if state == runnerclient.StateFailed {
		opts.ExitCode = 1
	}
	res, err := r.UpdateJob(context.Background(), job, state, opts)
	want := map[string][]string{runnerclient.StateSuccess: {"success"}, runnerclient.StateFailed: {"failed", "canceled"}}[state]
	if err != nil || res.Code != http.StatusOK || !slices.Contains(want, res.JobStatus) {
		t.Fatalf("final update %s of job %s (%d): code %d state %s Job-Status %q err %v",
			state, job.JobInfo.Name, job.ID, res.Code, res.State, res.JobStatus, err)
	}
}

// WantUpdate fails the test unless a PUT answer has the status code and Job-Status header
// want, and gitlab-runner would read it as intended: it drops the job on 403, 404 or
// Job-Status failed/canceled, and only then (runner-wire-format §2.3).
func WantUpdate(t testing.TB, what string, res runnerclient.UpdateResult, code int, jobStatus string) {
	t.Helper()
	if res.Code != code || res.JobStatus != jobStatus {
		t.Fatalf("%s: got %d Job-Status %q, want %d Job-Status %q", what, res.Code, res.JobStatus, code, jobStatus)
	}
	abort := code == http.StatusForbidden || code == http.StatusNotFound || jobStatus == "failed" || jobStatus == "canceled"
	if abort != (res.State == runnerclient.UpdateAbort) {
		t.Fatalf("%s: runner would read %v (abort=%v)", what, res.State, abort)
	}
}
