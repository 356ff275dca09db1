package runnerclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

const testRunnerToken = "glrt-test-token-123456"

// recorder answers with a fixed reply and keeps every request it saw.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, query string
	header              http.Header
	body                []byte
}

func (rec *recorder) last(t *testing.T) recorded {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("no request recorded")
	}
	return rec.reqs[len(rec.reqs)-1]
}

func (r recorded) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, r.body)
	}
	return m
}

func recordingServer(t *testing.T, code int, hdr map[string]string, body string) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), b})
		rec.mu.Unlock()
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

var requestIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Headers the runner puts on every request.
func checkCommonHeaders(t *testing.T, r recorded) {
	t.Helper()
	if ua := r.header.Get("User-Agent"); !strings.HasPrefix(ua, "gitlab-runner 19.4.0 (") {
		t.Errorf("User-Agent = %q", ua)
	}
	if id := r.header.Get("X-Request-Id"); !requestIDPattern.MatchString(id) {
		t.Errorf("X-Request-Id = %q, want 32 hex digits", id)
	}
}

const jobJSON = `{
  "id": 123, "token": "glcbt-abc", "allow_git_fetch": false,
  "job_info": {"name": "build", "stage": "test", "pipeline_id": 7, "project_id": 1, "project_name": "demo",
               "project_jobs_running_on_instance_runners_count": "+Inf"},
  "git_info": {"repo_url": "https://gitlab-ci-token:glcbt-abc@example.com/grp/demo.git", "ref": "main",
               "sha": "0123456789012345678901234567890123456789", "ref_type": "branch", "refspecs": [], "depth": 20},
  "runner_info": {"timeout": 3600},
  "variables": [{"key": "CI_JOB_ID", "value": "123", "public": true}, {"key": "GIT_STRATEGY", "value": "none", "public": true}],
  "steps": [{"name": "script", "script": ["echo hi"], "timeout": 3600, "when": "on_success", "allow_failure": false}],
  "image": {"name": ""}, "services": [], "artifacts": [], "cache": [], "credentials": [], "dependencies": [],
  "features": {"trace_sections": true, "failure_reasons": ["script_failure", "job_canceled"]},
  "something_new": {"ignored": true}
}`

func TestRequestJobWireFormat(t *testing.T) {
	t.Parallel()
	srv, rec := recordingServer(t, http.StatusNoContent, map[string]string{"X-GitLab-Last-Update": "queue-v1"}, "")
	c := New(srv.URL+"/", testRunnerToken, "s_0123456789ab")

	job, res, err := c.RequestJob(context.Background())
	if err != nil || job != nil || res.Code != 204 || !res.Healthy {
		t.Fatalf("RequestJob = %v, %+v, %v; want no job, healthy 204", job, res, err)
	}
	r := rec.last(t)
	checkCommonHeaders(t, r)
	if r.method != "POST" || r.path != "/api/v4/jobs/request" {
		t.Errorf("request = %s %s", r.method, r.path)
	}
	for k, want := range map[string]string{
		"Runner-Token": testRunnerToken,
		"Content-Type": "application/json",
		"Accept":       "application/json",
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	body := r.json(t)
	if body["token"] != testRunnerToken || body["system_id"] != "s_0123456789ab" {
		t.Errorf("token/system_id in body = %v/%v", body["token"], body["system_id"])
	}
	if _, ok := body["last_update"]; ok {
		t.Errorf("first request carries last_update %v, want it omitted", body["last_update"])
	}
	info := body["info"].(map[string]any)
	if info["name"] != "gitlab-runner" || info["version"] != "19.4.0" || info["executor"] != "shell" || info["shell"] != "bash" {
		t.Errorf("info = %v", info)
	}
	features := info["features"].(map[string]any)
	if len(features) != 31 {
		t.Errorf("features has %d keys, want all 31", len(features))
	}
	for k, v := range features {
		if _, ok := v.(bool); !ok {
			t.Errorf("feature %s = %v, want a boolean", k, v)
		}
	}
	if features["two_phase_job_commit"] != true || features["image"] != false {
		t.Errorf("two_phase_job_commit = %v, image = %v", features["two_phase_job_commit"], features["image"])
	}
	if cfg, ok := info["config"].(map[string]any); !ok || cfg["gpus"] != "" {
		t.Errorf("info.config = %v, want {\"gpus\":\"\"}", info["config"])
	}

	// The queue value comes back as last_update.
	c.Info.Features.TwoPhaseJobCommit = false
	if _, _, err := c.RequestJob(context.Background()); err != nil {
		t.Fatal(err)
	}
	body = rec.last(t).json(t)
	if body["last_update"] != "queue-v1" {
		t.Errorf("last_update = %v, want queue-v1", body["last_update"])
	}
	if f := body["info"].(map[string]any)["features"].(map[string]any); f["two_phase_job_commit"] != false {
		t.Errorf("two_phase_job_commit = %v after turning it off", f["two_phase_job_commit"])
	}
}

func TestRequestJobResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		code        int
		contentType string
		body        string
		wantJob     bool
		wantErr     bool
		healthy     bool
	}{
		{name: "201 job", code: 201, contentType: "application/json", body: jobJSON, wantJob: true, healthy: true},
		{name: "201 job with charset", code: 201, contentType: "application/json; charset=utf-8", body: jobJSON, wantJob: true, healthy: true},
		{name: "201 not JSON", code: 201, contentType: "text/plain", body: jobJSON, wantErr: true},
		{name: "201 sniffed text/plain", code: 201, body: jobJSON, wantErr: true},
		{name: "201 broken JSON", code: 201, contentType: "application/json", body: `{"id":`, wantErr: true},
		{name: "201 count as number", code: 201, contentType: "application/json",
			body: `{"id":1,"token":"t","job_info":{"project_jobs_running_on_instance_runners_count":3}}`, wantErr: true},
		{name: "204", code: 204, healthy: true},
		{name: "403 unhealthy", code: 403, contentType: "application/json", body: `{"message":"403 Forbidden"}`, wantErr: true},
		{name: "409 ask again", code: 409, contentType: "application/json", body: `{"message":"409 Conflict"}`, healthy: true},
		{name: "422 orphaned", code: 422, healthy: true},
		{name: "429 rate limited", code: 429, healthy: true},
		{name: "500", code: 500, healthy: true},
		{name: "503 unavailable", code: 503, healthy: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hdr := map[string]string{"X-GitLab-Last-Update": "v2"}
			if tc.contentType != "" {
				hdr["Content-Type"] = tc.contentType
			}
			srv, _ := recordingServer(t, tc.code, hdr, tc.body)
			c := New(srv.URL, testRunnerToken, "")
			job, res, err := c.RequestJob(context.Background())
			if (err != nil) != tc.wantErr || (job != nil) != tc.wantJob || res.Healthy != tc.healthy || res.Code != tc.code {
				t.Fatalf("RequestJob = job %v, %+v, err %v", job != nil, res, err)
			}
			if res.Header.Get("X-GitLab-Last-Update") != "v2" {
				t.Errorf("response headers not exposed: %v", res.Header)
			}
			if tc.code == 403 {
				var se *StatusError
				if !errors.As(err, &se) || se.Code != 403 || se.Message != "403 Forbidden" {
					t.Errorf("403 error = %#v", err)
				}
			}
			if tc.wantJob {
				if job.ID != 123 || job.Token != "glcbt-abc" || job.RunnerInfo.Timeout != 3600 ||
					len(job.Steps) != 1 || job.Steps[0].Script[0] != "echo hi" ||
					job.JobInfo.ProjectJobsRunningOnInstanceRunnersCount != "+Inf" || len(job.Raw) == 0 {
					t.Errorf("job = %+v", job)
				}
				if v, _ := job.Variable("GIT_STRATEGY"); v != "none" {
					t.Errorf("GIT_STRATEGY = %q", v)
				}
			}
			// As in client.doJSON, a 201 the runner cannot read does not update
			// last_update; every other answer does.
			wantLU := "v2"
			if tc.wantErr && tc.code == 201 {
				wantLU = ""
			}
			if got := c.LastUpdate(); got != wantLU {
				t.Errorf("LastUpdate = %q, want %q", got, wantLU)
			}
		})
	}
}

func TestRequestJobNoResponse(t *testing.T) {
	t.Parallel()
	c := New(deadServer(t), testRunnerToken, "")
	job, res, err := c.RequestJob(context.Background())
	if err == nil || job != nil || res.Healthy || res.Code != 0 {
		t.Errorf("RequestJob = %v, %+v, %v; want an unhealthy error", job, res, err)
	}
}

func TestUpdateJobWireFormat(t *testing.T) {
	t.Parallel()
	srv, rec := recordingServer(t, 200, map[string]string{"Job-Status": "running"}, "200")
	c := New(srv.URL, testRunnerToken, "s_x")
	job := &Job{ID: 42, Token: "glcbt-job"}

	if _, err := c.UpdateJob(context.Background(), job, StateRunning, UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := rec.last(t)
	checkCommonHeaders(t, r)
	if r.method != "PUT" || r.path != "/api/v4/jobs/42" {
		t.Errorf("request = %s %s", r.method, r.path)
	}
	if r.header.Get("Job-Token") != "glcbt-job" || r.header.Get("Content-Type") != "application/json" || r.header.Get("Accept") != "" {
		t.Errorf("headers = %v", r.header)
	}
	if r.header.Get("Runner-Token") != "" {
		t.Errorf("job update carries the runner token")
	}
	if got := string(r.body); !strings.Contains(got, `"output":{}`) {
		t.Errorf("ack body %s lacks \"output\":{}", got)
	}
	body := r.json(t)
	if body["token"] != "glcbt-job" || body["state"] != "running" {
		t.Errorf("ack body = %v", body)
	}
	for _, k := range []string{"exit_code", "failure_reason", "checksum"} {
		if _, ok := body[k]; ok {
			t.Errorf("ack body has %s, want it omitted", k)
		}
	}
	if _, ok := body["info"].(map[string]any)["features"]; !ok {
		t.Errorf("update without info.features")
	}

	opts := UpdateOptions{FailureReason: "script_failure", ExitCode: 2, Checksum: "crc32:0a1b2c3d", Bytesize: 12}
	if _, err := c.UpdateJob(context.Background(), job, StateFailed, opts); err != nil {
		t.Fatal(err)
	}
	body = rec.last(t).json(t)
	output := body["output"].(map[string]any)
	if body["state"] != "failed" || body["failure_reason"] != "script_failure" || body["exit_code"] != 2.0 ||
		body["checksum"] != "crc32:0a1b2c3d" || output["checksum"] != "crc32:0a1b2c3d" || output["bytesize"] != 12.0 {
		t.Errorf("final body = %v", body)
	}

	// exit_code 0 is omitted, even on a failure.
	if _, err := c.UpdateJob(context.Background(), job, StateFailed, UpdateOptions{FailureReason: "job_canceled"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.last(t).json(t)["exit_code"]; ok {
		t.Errorf("exit_code 0 was sent")
	}

	if _, err := c.Keepalive(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if body := rec.last(t).json(t); body["state"] != "pending" {
		t.Errorf("keep-alive state = %v, want pending", body["state"])
	}
}

func TestPatchTraceWireFormat(t *testing.T) {
	t.Parallel()
	srv, rec := recordingServer(t, 202, map[string]string{"Range": "0-5"}, "")
	c := New(srv.URL, testRunnerToken, "")
	if _, err := c.PatchTrace(context.Background(), &Job{ID: 9, Token: "glcbt-9"}, 0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	r := rec.last(t)
	checkCommonHeaders(t, r)
	if r.method != "PATCH" || r.path != "/api/v4/jobs/9/trace" || r.query != "debug_trace=false" {
		t.Errorf("request = %s %s?%s", r.method, r.path, r.query)
	}
	for k, want := range map[string]string{"Job-Token": "glcbt-9", "Content-Range": "0-4", "Content-Type": "text/plain", "Accept": ""} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if string(r.body) != "hello" {
		t.Errorf("body = %q", r.body)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		code        int
		contentType string
		body        string
		wantID      int64
		wantErr     bool
		wantStatus  int // when the error is a *StatusError
	}{
		{name: "200", code: 200, contentType: "application/json", body: `{"id":12,"token":"glrt-x","token_expires_at":null}`, wantID: 12},
		{name: "200 id 0", code: 200, contentType: "application/json", body: `{"id":0,"token":"glrt-x"}`, wantErr: true},
		{name: "200 plain text", code: 200, contentType: "text/plain", body: `200`, wantErr: true},
		{name: "403", code: 403, contentType: "application/json", body: `{"message":"403 Forbidden"}`, wantErr: true, wantStatus: 403},
		{name: "422 orphaned", code: 422, contentType: "application/json", body: `{"message":{"runner":["is orphaned"]}}`, wantErr: true, wantStatus: 422},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, rec := recordingServer(t, tc.code, map[string]string{"Content-Type": tc.contentType}, tc.body)
			c := New(srv.URL+"/ci", testRunnerToken, "s_0123456789ab")
			res, err := c.Verify(context.Background())
			if (err != nil) != tc.wantErr || res.ID != tc.wantID {
				t.Fatalf("Verify = %+v, %v", res, err)
			}
			var se *StatusError
			if tc.wantStatus != 0 && (!errors.As(err, &se) || se.Code != tc.wantStatus || !strings.Contains(err.Error(), "POST /api/v4/runners/verify")) {
				t.Errorf("error = %#v, want a StatusError %d", err, tc.wantStatus)
			}
			if tc.name == "422 orphaned" && se.Message != "runner: is orphaned" {
				t.Errorf("message = %q", se.Message)
			}
			r := rec.last(t)
			checkCommonHeaders(t, r)
			if r.path != "/api/v4/runners/verify" || r.header.Get("Runner-Token") != testRunnerToken || r.header.Get("Accept") != "application/json" {
				t.Errorf("request = %s %v", r.path, r.header)
			}
			body := r.json(t)
			if body["token"] != testRunnerToken || body["system_id"] != "s_0123456789ab" || body["info"] == nil {
				t.Errorf("body = %v", body)
			}
		})
	}
}

func TestBaseURL(t *testing.T) {
	t.Parallel()
	for base, want := range map[string]string{
		"http://gl.example":          "http://gl.example/api/v4/jobs/request",
		"http://gl.example/":         "http://gl.example/api/v4/jobs/request",
		"https://gl.example/ci":      "https://gl.example/api/v4/jobs/request",
		"https://gl.example/sub/ci/": "https://gl.example/sub/api/v4/jobs/request",
	} {
		got, err := New(base, "", "").url("jobs/request")
		if err != nil || got != want {
			t.Errorf("url(%q) = %q, %v; want %q", base, got, err, want)
		}
	}
	if _, _, err := New("ftp://gl.example", "", "").RequestJob(context.Background()); err == nil {
		t.Errorf("ftp base URL accepted")
	}
}
