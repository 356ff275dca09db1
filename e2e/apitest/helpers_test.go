// Package apitest_test drives jobapi's legacy (one-phase) runner flow and its operator API
// over real HTTP, against real Postgres and Redis (one database and key prefix per test).
package apitest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// decode unmarshals b into a new T, failing the test on error.
func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %.300s: %v", v, b, err)
	}
	return v
}

// --- runner side -----------------------------------------------------------------------

// features is what a gitlab-runner 19.4 shell runner declares (a subset; all booleans).
func features(twoPhase bool) map[string]bool {
	return map[string]bool{"variables": true, "artifacts": true, "cache": true, "refspecs": true,
		"masking": true, "raw_variables": true, "multi_build_steps": true, "trace_reset": true,
		"trace_checksum": true, "trace_size": true, "cancelable": true, "return_exit_code": true,
		"cancel_gracefully": true, "two_phase_job_commit": twoPhase, "image": false, "services": false}
}

func runnerInfo() map[string]any {
	return map[string]any{"name": "gitlab-runner", "version": "19.4.0", "revision": "fc1f1862",
		"platform": "linux", "architecture": "amd64", "executor": "shell", "shell": "bash",
		"features": features(false), "config": map[string]any{"gpus": ""}}
}

// requestJob sends POST /jobs/request as gitlab-runner does (lastUpdate "" is omitted).
func requestJob(t testing.TB, base, token, systemID, lastUpdate string) (*http.Response, []byte) {
	t.Helper()
	body := map[string]any{"token": token, "info": runnerInfo()}
	if systemID != "" {
		body["system_id"] = systemID
	}
	if lastUpdate != "" {
		body["last_update"] = lastUpdate
	}
	return jobapitest.Send(t, base, "POST", "/api/v4/jobs/request", body, "RUNNER-TOKEN", token, "Accept", "application/json")
}

// takeJob requests a job and requires a 201.
func takeJob(t testing.TB, base, token string) api.Job {
	t.Helper()
	resp, b := requestJob(t, base, token, "s_0123456789ab", "")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	return decode[api.Job](t, b)
}

// wantNoJob requests a job and requires a 204.
func wantNoJob(t testing.TB, base, token string) {
	t.Helper()
	resp, b := requestJob(t, base, token, "s_0123456789ab", "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("job request: status %d, want 204; body %.300s", resp.StatusCode, b)
	}
}

// updateJob sends PUT /jobs/:id with the job token in the header and the body.
func updateJob(t testing.TB, base string, id int64, token string, body map[string]any) (*http.Response, []byte) {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["token"]; !ok {
		body["token"] = token
	}
	return jobapitest.Send(t, base, "PUT", fmt.Sprintf("/api/v4/jobs/%d", id), body, "JOB-TOKEN", token)
}

// patchTrace sends PATCH /jobs/:id/trace with Content-Range start-(start+len-1).
func patchTrace(t testing.TB, base string, id int64, token string, start int, data []byte) (*http.Response, []byte) {
	t.Helper()
	return jobapitest.Send(t, base, "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", id), data,
		"JOB-TOKEN", token, "Content-Type", "text/plain",
		"Content-Range", fmt.Sprintf("%d-%d", start, start+len(data)-1))
}

// wantJobStatus checks the Job-Status header.
func wantJobStatus(t testing.TB, resp *http.Response, want string) {
	t.Helper()
	if got := resp.Header.Get("Job-Status"); got != want {
		t.Errorf("%s %s: Job-Status %q, want %q", resp.Request.Method, resp.Request.URL.Path, got, want)
	}
}

// --- operator side ---------------------------------------------------------------------

// createRunner registers a runner with the given settings and returns its id and token.
func createRunner(t testing.TB, inst *jobapitest.Instance, tags []string, runUntagged bool) (int64, string) {
	t.Helper()
	if tags == nil {
		tags = []string{}
	}
	var out api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": "apitest", "tag_list": tags, "run_untagged": runUntagged}, &out)
	return out.ID, out.Token
}

// jobStatuses maps job name to status for the latest attempt of each job.
func jobStatuses(p api.Pipeline) map[string]string {
	out := map[string]string{}
	for name, j := range jobapitest.Latest(p) {
		out[name] = j.Status
	}
	return out
}

func jobByName(t testing.TB, p api.Pipeline, name string) api.PipelineJob {
	t.Helper()
	j, ok := jobapitest.Latest(p)[name]
	if !ok {
		t.Fatalf("pipeline %d has no job %q: %+v", p.ID, name, p.Jobs)
	}
	return j
}

// finishJob plays a legacy job to its end: final update with state, reason and exit code.
func finishJob(t testing.TB, base string, job api.Job, state, reason string, exitCode int) {
	t.Helper()
	body := map[string]any{"state": state}
	if reason != "" {
		body["failure_reason"] = reason
	}
	if exitCode != 0 {
		body["exit_code"] = exitCode
	}
	resp, b := updateJob(t, base, job.ID, job.Token, body)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
}

// --- database --------------------------------------------------------------------------

// tables are counted to prove that a rejected request wrote nothing.
var tables = []string{"runners", "runner_managers", "pipelines", "pipeline_iids", "builds", "build_events", "build_trace_chunks"}

// rowCounts returns the number of rows of each table in the instance's database.
func rowCounts(t testing.TB, inst *jobapitest.Instance) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tbl := range tables {
		out[tbl] = jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM "+tbl)
	}
	return out
}

func sameCounts(a, b map[string]int) bool {
	for _, tbl := range tables {
		if a[tbl] != b[tbl] {
			return false
		}
	}
	return true
}
