package runnertest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

func TestUpdateJobLegacy(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})

	t.Run("touch then success, repeat is idempotent", func(t *testing.T) {
		p, job := inst.LegacyJob(t, nil)
		// The ack a legacy runner still sends, then keep-alive touches (with output).
		for range 3 {
			resp, b := jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "running",
				"output": map[string]any{"checksum": "crc32:00000000", "bytesize": 0}})
			jobapitest.WantStatus(t, resp, b, http.StatusOK)
			jobapitest.WantJobStatus(t, resp, "running")
		}
		// state=pending on a running job is a touch too.
		resp, b := jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "pending"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "running")

		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "success"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "success")
		d := inst.Job(t, 7, job.ID)
		if d.Status != "success" || d.FailureReason != nil || d.FinishedAt == nil {
			t.Errorf("job after success: %+v", d)
		}
		if st := inst.Pipeline(t, p).Status; st != "success" {
			t.Errorf("pipeline %s, want success", st)
		}
		// A retry of the final update after a lost answer: 200.
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "success"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "success")
		// Anything else on the finished job: 403 with Job-Status, so the runner aborts.
		for _, state := range []string{"running", "failed", "pending"} {
			resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": state, "failure_reason": ""})
			jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
			jobapitest.WantJobStatus(t, resp, "success")
		}
		// Trace after the end: 403 with Job-Status too.
		resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, []byte("late"))
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
		jobapitest.WantJobStatus(t, resp, "success")
		if d := inst.Job(t, 7, job.ID); d.Status != "success" {
			t.Errorf("rejected updates changed the job: %+v", d)
		}
	})

	t.Run("failed with reason and exit code", func(t *testing.T) {
		p, job := inst.LegacyJob(t, nil)
		final := map[string]any{"state": "failed",
			"failure_reason": "script_failure", "exit_code": 3, "output": map[string]any{"checksum": "crc32:0a1b2c3d", "bytesize": 12}}
		// The runner says its log is 12 bytes, the server has none: 412, send it again
		// (gitlab-runner rewinds its trace and PATCHes it), the job still runs.
		resp, b := jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, final)
		jobapitest.WantJSONError(t, resp, b, http.StatusPreconditionFailed)
		if d := inst.Job(t, 7, job.ID); d.Status != "running" {
			t.Fatalf("job after a 412: %s, want running", d.Status)
		}
		resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, []byte("hello world\n"))
		jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, final)
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "failed")
		d := inst.Job(t, 7, job.ID)
		if d.Status != "failed" || d.FailureReason == nil || *d.FailureReason != "script_failure" ||
			d.ExitCode == nil || *d.ExitCode != 3 {
			t.Errorf("job after failure: %+v (reason %v, exit %v)", d, d.FailureReason, d.ExitCode)
		}
		if st := inst.Pipeline(t, p).Status; st != "failed" {
			t.Errorf("pipeline %s, want failed", st)
		}
		// No automatic retry for a script failure without a retry rule.
		if d.RetriedBy != nil {
			t.Errorf("script failure was retried: %+v", d)
		}
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "failed",
			"failure_reason": "script_failure", "exit_code": 3})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "failed")
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "success"})
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
		jobapitest.WantJobStatus(t, resp, "failed")
	})

	t.Run("failed without a reason is unknown_failure", func(t *testing.T) {
		_, job := inst.LegacyJob(t, nil)
		jobapitest.FinishJob(t, inst.URL, job, "failed", "", 0)
		d := inst.Job(t, 7, job.ID)
		if d.FailureReason == nil || *d.FailureReason != "unknown_failure" {
			t.Errorf("failure_reason %v, want unknown_failure", d.FailureReason)
		}
	})

	t.Run("token in body only, or header only", func(t *testing.T) {
		_, job := inst.LegacyJob(t, nil)
		resp, b := jobapitest.Send(t, inst.URL, "PUT", fmt.Sprintf("/api/v4/jobs/%d", job.ID), map[string]any{"token": job.Token, "state": "running"})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		resp, b = jobapitest.Send(t, inst.URL, "PUT", fmt.Sprintf("/api/v4/jobs/%d", job.ID), map[string]any{"state": "running"}, "JOB-TOKEN", job.Token)
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "running")
	})

	t.Run("wrong token and unknown state", func(t *testing.T) {
		_, job := inst.LegacyJob(t, nil)
		_, other := inst.LegacyJob(t, nil)
		before := jobapitest.RowCounts(t, inst)
		for name, tok := range map[string]string{"other job's token": other.Token, "garbage": "glcbt-nope", "empty": ""} {
			resp, b := jobapitest.Send(t, inst.URL, "PUT", fmt.Sprintf("/api/v4/jobs/%d", job.ID),
				map[string]any{"token": tok, "state": "success"}, "JOB-TOKEN", tok)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: %d %s, want 403", name, resp.StatusCode, b)
			}
		}
		// A job that does not exist: 403 too (the runner must abort, and ids are not probed).
		resp, b := jobapitest.UpdateJob(t, inst.URL, 987654321, job.Token, map[string]any{"state": "running"})
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)

		for _, state := range []string{"done", "", "RUNNING", "canceled", "waiting_for_runner_ack"} {
			resp, b := jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": state})
			jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
		}
		resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "failed", "failure_reason": "bogus_reason"})
		jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
		if after := jobapitest.RowCounts(t, inst); !jobapitest.SameCounts(before, after) {
			t.Errorf("rejected updates wrote rows: %v → %v", before, after)
		}
		if d := inst.Job(t, 7, job.ID); d.Status != "running" {
			t.Errorf("rejected updates changed the job: %s", d.Status)
		}
	})
}

// Windows reports crashes as unsigned 32-bit exit codes (0xC0000005 = 3221225477): past
// 2^31-1 the final update used to fail with 500 and the job stayed running. The value is
// stored and shown as the runner sent it, on the runner's path and in the event.
func TestUpdateJobLargeExitCode(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	for _, code := range []int64{3221225477, 1<<53 - 1, -1073741819} {
		_, job := inst.LegacyJob(t, nil)
		resp, b := jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "failed",
			"failure_reason": "script_failure", "exit_code": code})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		jobapitest.WantJobStatus(t, resp, "failed")
		resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/7/jobs/%d", job.ID), nil)
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		d := jobapitest.Decode[struct {
			Status   string `json:"status"`
			ExitCode *int64 `json:"exit_code"`
		}](t, b)
		if d.Status != "failed" || d.ExitCode == nil || *d.ExitCode != code {
			t.Errorf("exit code %d: job shows %s (%s)", code, d.Status, b)
		}
		_, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/7/jobs/%d/events", job.ID), nil)
		if !strings.Contains(string(b), fmt.Sprintf(`"exit_code":%d`, code)) {
			t.Errorf("exit code %d: not in the events %s", code, b)
		}
	}
}
