package jobapitest

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// The runner's calls as raw HTTP, for tests that check what is on the wire in the legacy
// (one-phase) flow: the job as api.Job, answers with their headers. Runner plays
// gitlab-runner through runnerclient instead.

// RunnerFeatures is what a gitlab-runner 19.4 shell runner declares (a subset; all booleans).
func RunnerFeatures(twoPhase bool) map[string]bool {
	return map[string]bool{"variables": true, "artifacts": true, "cache": true, "refspecs": true,
		"masking": true, "raw_variables": true, "multi_build_steps": true, "trace_reset": true,
		"trace_checksum": true, "trace_size": true, "cancelable": true, "return_exit_code": true,
		"cancel_gracefully": true, "two_phase_job_commit": twoPhase, "image": false, "services": false}
}

// RunnerInfo is the info object of that runner, declaring the legacy flow.
func RunnerInfo() map[string]any {
	return map[string]any{"name": "gitlab-runner", "version": "19.4.0", "revision": "fc1f1862",
		"platform": "linux", "architecture": "amd64", "executor": "shell", "shell": "bash",
		"features": RunnerFeatures(false), "config": map[string]any{"gpus": ""}}
}

// RequestJob sends POST /jobs/request as gitlab-runner does (lastUpdate "" is omitted).
func RequestJob(t testing.TB, base, token, systemID, lastUpdate string) (*http.Response, []byte) {
	t.Helper()
	body := map[string]any{"token": token, "info": RunnerInfo()}
	if systemID != "" {
		body["system_id"] = systemID
	}
	if lastUpdate != "" {
		body["last_update"] = lastUpdate
	}
	return Send(t, base, "POST", "/api/v4/jobs/request", body, "RUNNER-TOKEN", token, "Accept", "application/json")
}

// TakeJob requests a job and requires a 201.
func TakeJob(t testing.TB, base, token string) api.Job {
	t.Helper()
	resp, b := RequestJob(t, base, token, "s_0123456789ab", "")
	WantStatus(t, resp, b, http.StatusCreated)
	return Decode[api.Job](t, b)
}

// TakeJobNamed takes the next job and requires it to be the named one.
func TakeJobNamed(t testing.TB, inst *Instance, token, name string) api.Job {
	t.Helper()
	j := TakeJob(t, inst.URL, token)
	if j.JobInfo.Name != name {
		t.Fatalf("got job %q, want %q", j.JobInfo.Name, name)
	}
	return j
}

// WantNoJob requests a job and requires a 204.
func WantNoJob(t testing.TB, base, token string) {
	t.Helper()
	resp, b := RequestJob(t, base, token, "s_0123456789ab", "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("job request: status %d, want 204; body %.300s", resp.StatusCode, b)
	}
}

// UpdateJob sends PUT /jobs/:id with the job token in the header and the body.
func UpdateJob(t testing.TB, base string, id int64, token string, body map[string]any) (*http.Response, []byte) {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["token"]; !ok {
		body["token"] = token
	}
	return Send(t, base, "PUT", fmt.Sprintf("/api/v4/jobs/%d", id), body, "JOB-TOKEN", token)
}

// PatchTrace sends PATCH /jobs/:id/trace with Content-Range start-(start+len-1).
func PatchTrace(t testing.TB, base string, id int64, token string, start int, data []byte) (*http.Response, []byte) {
	t.Helper()
	return Send(t, base, "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", id), data,
		"JOB-TOKEN", token, "Content-Type", "text/plain",
		"Content-Range", fmt.Sprintf("%d-%d", start, start+len(data)-1))
}

// WantJobStatus checks the Job-Status header.
func WantJobStatus(t testing.TB, resp *http.Response, want string) {
	t.Helper()
	if got := resp.Header.Get("Job-Status"); got != want {
		t.Errorf("%s %s: Job-Status %q, want %q", resp.Request.Method, resp.Request.URL.Path, got, want)
	}
}

// FinishJob plays a legacy job to its end: final update with state, reason and exit code.
func FinishJob(t testing.TB, base string, job api.Job, state, reason string, exitCode int) {
	t.Helper()
	body := map[string]any{"state": state}
	if reason != "" {
		body["failure_reason"] = reason
	}
	if exitCode != 0 {
		body["exit_code"] = exitCode
	}
	resp, b := UpdateJob(t, base, job.ID, job.Token, body)
	WantStatus(t, resp, b, http.StatusOK)
}

// LegacyJob creates a one-job pipeline for project 7 and hands the job to a fresh runner.
func (i *Instance) LegacyJob(t testing.TB, job Job) (api.Pipeline, api.Job) {
	t.Helper()
	_, token := i.CreateRunner(t)
	if job == nil {
		job = Job{}
	}
	job["name"], job["stage"] = "only", "test"
	if job["script"] == nil {
		job["script"] = "echo hi"
	}
	p := i.CreatePipeline(t, 7, []string{"test"}, job)
	return p, TakeJob(t, i.URL, token)
}

// JobVariables maps a job's variables by key (the last one wins, as in gitlab-runner).
func JobVariables(job api.Job) map[string]api.JobVariable {
	out := map[string]api.JobVariable{}
	for _, v := range job.Variables {
		out[v.Key] = v
	}
	return out
}
