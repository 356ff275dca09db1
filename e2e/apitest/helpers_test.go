// Package apitest_test drives jobapi's legacy (one-phase) runner flow and its operator API
// over real HTTP, against real Postgres and Redis (one database and key prefix per test).
package apitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// client is shared by the raw calls; its own transport keeps tests independent of
// http.DefaultTransport.
var client = &http.Client{
	Transport: http.DefaultTransport.(*http.Transport).Clone(),
	Timeout:   30 * time.Second,
}

// start runs one replica on a fresh database; configure may be nil.
func start(t *testing.T, configure func(*server.Config)) *jobapitest.Instance {
	t.Helper()
	return jobapitest.Start(t, jobapitest.Options{Configure: configure})
}

// send makes one request. body: nil (none), []byte or string (raw), anything else is
// JSON-encoded. hdr holds header name/value pairs; a body gets Content-Type
// application/json unless hdr sets one. The response body is read and returned.
func send(t testing.TB, base, method, path string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, out
}

// admin is send with the operator token.
func admin(t testing.TB, inst *jobapitest.Instance, method, path string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return send(t, inst.URL, method, path, body, append([]string{"PRIVATE-TOKEN", jobapitest.AdminToken}, hdr...)...)
}

// decode unmarshals b into a new T, failing the test on error.
func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %.300s: %v", v, b, err)
	}
	return v
}

// wantStatus fails unless resp has the status code want.
func wantStatus(t testing.TB, resp *http.Response, body []byte, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d; body: %.500s", resp.Request.Method, resp.Request.URL.Path,
			resp.StatusCode, want, body)
	}
}

// wantJSONError checks an error answer: the status, Content-Type application/json and a
// {"message": "..."} body with a non-empty message. It returns the message.
func wantJSONError(t testing.TB, resp *http.Response, body []byte, want int) string {
	t.Helper()
	wantStatus(t, resp, body, want)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q, want application/json", resp.Request.Method, resp.Request.URL.Path, ct)
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s %s: error body is not JSON: %.300s", resp.Request.Method, resp.Request.URL.Path, body)
	}
	msg, ok := e["message"].(string)
	if !ok || msg == "" {
		t.Errorf("%s %s: error body %.300s has no message string", resp.Request.Method, resp.Request.URL.Path, body)
	}
	return msg
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
	return send(t, base, "POST", "/api/v4/jobs/request", body, "RUNNER-TOKEN", token, "Accept", "application/json")
}

// takeJob requests a job and requires a 201.
func takeJob(t testing.TB, base, token string) api.Job {
	t.Helper()
	resp, b := requestJob(t, base, token, "s_0123456789ab", "")
	wantStatus(t, resp, b, http.StatusCreated)
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
	return send(t, base, "PUT", fmt.Sprintf("/api/v4/jobs/%d", id), body, "JOB-TOKEN", token)
}

// patchTrace sends PATCH /jobs/:id/trace with Content-Range start-(start+len-1).
func patchTrace(t testing.TB, base string, id int64, token string, start int, data []byte) (*http.Response, []byte) {
	t.Helper()
	return send(t, base, "PATCH", fmt.Sprintf("/api/v4/jobs/%d/trace", id), data,
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

func pipelinePath(p api.Pipeline) string {
	return fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", p.ProjectID, p.ID)
}

func getPipeline(t testing.TB, inst *jobapitest.Instance, p api.Pipeline) api.Pipeline {
	t.Helper()
	var out api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", pipelinePath(p), nil, &out)
	return out
}

// jobStatuses maps job name to status for the latest attempt of each job.
func jobStatuses(p api.Pipeline) map[string]string {
	out := map[string]string{}
	for _, j := range p.Jobs {
		if j.RetriedBy == nil {
			out[j.Name] = j.Status
		}
	}
	return out
}

func jobByName(t testing.TB, p api.Pipeline, name string) api.PipelineJob {
	t.Helper()
	for _, j := range p.Jobs {
		if j.Name == name && j.RetriedBy == nil {
			return j
		}
	}
	t.Fatalf("pipeline %d has no job %q: %+v", p.ID, name, p.Jobs)
	return api.PipelineJob{}
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
	wantStatus(t, resp, b, http.StatusOK)
}

// --- database --------------------------------------------------------------------------

// tables are counted to prove that a rejected request wrote nothing.
var tables = []string{"runners", "runner_managers", "pipelines", "builds", "build_events", "build_trace_chunks"}

// rowCounts returns the number of rows of each table in the instance's database.
func rowCounts(t testing.TB, inst *jobapitest.Instance) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]int64{}
	for _, tbl := range tables {
		var n int64
		if err := inst.Pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", tbl, err)
		}
		out[tbl] = n
	}
	return out
}

func sameCounts(a, b map[string]int64) bool {
	for _, tbl := range tables {
		if a[tbl] != b[tbl] {
			return false
		}
	}
	return true
}

// queryInt runs a one-number query on the instance's database.
func queryInt(t testing.TB, inst *jobapitest.Instance, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int64
	if err := inst.Pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
