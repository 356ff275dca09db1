package runnertest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestEndToEndShellJob plays a GIT_STRATEGY=none shell job the way gitlab-runner 19.4 does
// (runnerclient: verify, poll, ack, trace patches, final update) against a real replica.
// The runner declares two_phase_job_commit, as the real one always does; with the flag off
// the job is handed out in the legacy flow.
func TestEndToEndShellJob(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runnerID, token := inst.RegisterRunner(t, "test runner", []string{"shell"}, true)
	p := inst.CreatePipeline(t, 11, []string{"build", "test"},
		jobapitest.Job{"name": "hello", "stage": "build", "tags": []string{"shell"},
			"script":       []string{"echo hello from jobapi", "echo second line"},
			"after_script": []string{"echo cleanup"},
			"variables":    map[string]any{"GIT_STRATEGY": "none"}},
		jobapitest.Job{"name": "check", "stage": "test", "script": []string{"echo checked"}})

	c := runnerclient.New(inst.URL, token, "s_e2e0123456789")
	c.MaxWait = 20 * time.Millisecond
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	v, err := c.Verify(ctx)
	if err != nil || v.ID != runnerID || !v.TokenExpiresAt.IsZero() {
		t.Fatalf("verify: %+v, %v", v, err)
	}

	var outcomes []runnerclient.Outcome
	for _, name := range []string{"hello", "check"} {
		job, res, err := c.RequestJob(ctx)
		if err != nil || job == nil {
			t.Fatalf("request for %s: %+v, %v", name, res, err)
		}
		if job.JobInfo.Name != name {
			t.Fatalf("got %s, want %s", job.JobInfo.Name, name)
		}
		if name == "hello" {
			if s, _ := job.Variable("GIT_STRATEGY"); s != "none" {
				t.Errorf("GIT_STRATEGY %q, want none", s)
			}
			if job.Timeout() != time.Hour {
				t.Errorf("job timeout %v, want the 1h default", job.Timeout())
			}
		}
		out, err := c.RunJob(ctx, job, runnerclient.FakeShell{})
		if err != nil || out.Result != runnerclient.Succeeded || out.AckCode != http.StatusOK || out.FinalCode != http.StatusOK {
			t.Fatalf("run %s: %+v, %v", name, out, err)
		}
		outcomes = append(outcomes, out)

		d := inst.Job(t, 11, job.ID)
		if d.Status != "success" || d.TwoPhase || d.RunnerManager == nil || d.RunnerManager.SystemID != "s_e2e0123456789" {
			t.Errorf("%s after the run: %+v", name, d)
		}
		resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/11/jobs/%d/trace", job.ID), nil)
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		if !bytes.Equal(b, out.Trace) || d.TraceSize != int64(len(out.Trace)) {
			t.Errorf("%s stored trace (%d bytes, trace_size %d):\n%s\nwant what the runner sent (%d bytes):\n%s",
				name, len(b), d.TraceSize, b, len(out.Trace), out.Trace)
		}
	}
	log := string(outcomes[0].Trace)
	for _, want := range []string{"hello from jobapi", "second line", "cleanup", "Job succeeded"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	// Nothing left: the next poll is a 204 that the one after echoes.
	job, res, err := c.RequestJob(ctx)
	if err != nil || job != nil || res.Code != http.StatusNoContent {
		t.Fatalf("poll after the pipeline: %+v, %v", res, err)
	}
	got := inst.Pipeline(t, p)
	jobapitest.WantStatuses(t, got, "success", map[string]string{"hello": "success", "check": "success"})
	if ev := jobapitest.EventTypes(inst.Events(t, 11, jobapitest.JobByName(t, got, "hello").ID)); ev != "queued,assigned,finished" {
		t.Errorf("events %s", ev)
	}
}
