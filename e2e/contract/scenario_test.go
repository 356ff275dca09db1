package contract_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

const (
	projectID  = 7
	traceLimit = 64 // bytes: small enough for the scenario to cross it
	// registrationToken is what gitlab-runner register --registration-token sends.
	registrationToken = "contract-registration-token"
)

// runnerInfo is the info object gitlab-runner 19.4 (shell executor) sends: every feature key.
func runnerInfo(twoPhase bool) map[string]any {
	features := map[string]bool{}
	for _, f := range []string{"variables", "artifacts", "cache", "fallback_cache_keys", "shared",
		"upload_multiple_artifacts", "upload_raw_artifacts", "refspecs", "masking", "raw_variables",
		"artifacts_exclude", "multi_build_steps", "trace_reset", "trace_checksum", "trace_size",
		"vault_secrets", "cancelable", "return_exit_code", "cancel_gracefully", "job_inputs"} {
		features[f] = true
	}
	for _, f := range []string{"image", "services", "session", "terminal", "proxy", "service_variables",
		"service_multiple_aliases", "image_executor_opts", "service_executor_opts", "native_steps_integration"} {
		features[f] = false
	}
	features["two_phase_job_commit"] = twoPhase
	return map[string]any{"name": "gitlab-runner", "version": "19.4.0", "revision": "fc1f1862",
		"platform": "linux", "architecture": "amd64", "executor": "shell", "shell": "bash",
		"features": features, "config": map[string]any{"gpus": ""}}
}

func output(trace string) map[string]any {
	return map[string]any{"checksum": fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE([]byte(trace))), "bytesize": len(trace)}
}

// contentRange is the header gitlab-runner sends for data appended at offset.
func contentRange(offset int, data string) string {
	return fmt.Sprintf("%d-%d", offset, offset+len(data)-1)
}

// TestScenario drives every route of the API through a validating transport against a real
// replica: each request and response must match openapi.yaml, and every operation must be
// exercised.
func TestScenario(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.TraceLimit = traceLimit
		c.RunnerRegistrationToken = registrationToken
	}})
	v := newValidator(t)
	c := &client{t: t, base: inst.URL, http: &http.Client{Transport: v}}
	defer func() {
		if !t.Failed() { // after a failure, the missing calls are only noise
			v.checkCoverage(t)
		}
	}()

	// ---- health
	c.do(http.StatusOK, "GET", "/-/liveness", nil)
	c.do(http.StatusOK, "GET", "/-/readiness", nil)
	if _, b := c.do(http.StatusOK, "GET", "/metrics", nil); !bytes.Contains(b, []byte("jobapi_http_requests_total")) {
		t.Errorf("/metrics lacks jobapi_http_requests_total")
	}

	// ---- OpenID Connect discovery (the id_tokens' issuer)
	c.do(http.StatusOK, "GET", "/.well-known/openid-configuration", nil)
	c.do(http.StatusOK, "GET", "/oauth/discovery/keys", nil)

	// ---- operator authentication
	c.do(http.StatusUnauthorized, "GET", "/api/v4/runners", nil, invalid)
	c.do(http.StatusUnauthorized, "GET", "/api/v4/runners", nil, header("PRIVATE-TOKEN", "not-the-admin-token"))
	c.do(http.StatusUnauthorized, "GET", "/api/v4/features", nil, invalid)
	c.do(http.StatusUnauthorized, "POST", path("/api/v4/projects/%d/pipeline", projectID),
		jsonBody(t, map[string]any{"jobs": []any{map[string]any{"name": "x", "script": "true"}}}),
		header("PRIVATE-TOKEN", "wrong"))

	// ---- projects and their variables: create (JSON and form), list, show, update, delete
	var proj api.Project
	c.decode(&proj, http.StatusCreated, "POST", "/api/v4/projects", jsonBody(t, map[string]any{
		"name": "Contract", "repo_url": "https://ci:s3cr3t-pass@git.example.com/grp/contract.git"}), admin)
	if proj.RepoURL != "https://*****:*****@git.example.com/grp/contract.git" || proj.Path != "contract" {
		t.Errorf("created project = %+v, want the remote redacted and path contract", proj)
	}
	c.do(http.StatusCreated, "POST", "/api/v4/projects", formBody(url.Values{
		"name": {"form project"}, "path": {"form"}, "repo_url": {"file:///srv/git/form.git"}, "default_branch": {"trunk"}}), admin)
	c.do(http.StatusBadRequest, "POST", "/api/v4/projects", jsonBody(t, map[string]any{"name": "x", "repo_url": "ftp://h/r"}), admin)
	c.do(http.StatusBadRequest, "POST", "/api/v4/projects", jsonBody(t, map[string]any{"name": "Contract"}), admin)
	var projects []api.Project
	resp := c.decode(&projects, http.StatusOK, "GET", "/api/v4/projects?per_page=1", nil, admin)
	wantHeader(t, "projects page 1", resp, "X-Total", "2")
	wantHeader(t, "projects page 1", resp, "X-Next-Page", "2")
	c.do(http.StatusOK, "GET", path("/api/v4/projects/%d", proj.ID), nil, admin)
	c.do(http.StatusNotFound, "GET", "/api/v4/projects/999999", nil, admin)
	c.do(http.StatusOK, "PUT", path("/api/v4/projects/%d", proj.ID), jsonBody(t, map[string]any{"default_branch": "develop"}), admin)
	c.do(http.StatusBadRequest, "PUT", path("/api/v4/projects/%d", proj.ID), jsonBody(t, map[string]any{"default_branch": "a..b"}), admin)
	c.do(http.StatusCreated, "POST", path("/api/v4/projects/%d/variables", proj.ID), jsonBody(t, map[string]any{
		"key": "DEPLOY_TOKEN", "value": "abcdefgh12345", "masked": true, "variable_type": "env_var"}), admin)
	c.do(http.StatusCreated, "POST", path("/api/v4/projects/%d/variables", proj.ID), formBody(url.Values{
		"key": {"KUBECONFIG"}, "value": {"apiVersion: v1"}, "variable_type": {"file"}, "protected": {"true"}}), admin)
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/variables", proj.ID), jsonBody(t, map[string]any{
		"key": "SHORT", "value": "abc", "masked": true}), admin)
	c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/variables", proj.ID), nil, admin)
	c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/variables/DEPLOY_TOKEN", proj.ID), nil, admin)
	c.do(http.StatusOK, "PUT", path("/api/v4/projects/%d/variables/DEPLOY_TOKEN", proj.ID), jsonBody(t, map[string]any{"protected": true}), admin)
	c.do(http.StatusNoContent, "DELETE", path("/api/v4/projects/%d/variables/KUBECONFIG", proj.ID), nil, admin)
	c.do(http.StatusNotFound, "DELETE", path("/api/v4/projects/%d/variables/KUBECONFIG", proj.ID), nil, admin)
	c.do(http.StatusNoContent, "DELETE", path("/api/v4/projects/%d", proj.ID+1), nil, admin)

	// ---- protected branches and tags: create (JSON, form, query string), list, show by the
	// encoded name, 409 on a duplicate, delete
	pb := path("/api/v4/projects/%d/protected_branches", proj.ID)
	c.do(http.StatusCreated, "POST", pb, jsonBody(t, map[string]any{"name": "release/*", "push_access_level": 30, "allow_force_push": true}), admin)
	c.do(http.StatusCreated, "POST", pb+"?name=*-stable&merge_access_level=0", nil, admin)
	c.do(http.StatusCreated, "POST", pb, formBody(url.Values{"name": {"hotfix"}, "push_access_level": {"40"}}), admin)
	c.do(http.StatusConflict, "POST", pb, jsonBody(t, map[string]any{"name": "release/*"}), admin)
	c.do(http.StatusBadRequest, "POST", pb, jsonBody(t, map[string]any{"name": "x", "push_access_level": 35}), admin, invalid)
	c.do(http.StatusNotFound, "POST", "/api/v4/projects/999999/protected_branches", jsonBody(t, map[string]any{"name": "main"}), admin)
	var branches []api.ProtectedBranch
	c.decode(&branches, http.StatusOK, "GET", pb, nil, admin)
	if len(branches) != 4 { // with main, protected at the project's creation
		t.Errorf("protected branches = %+v, want 4", branches)
	}
	c.do(http.StatusOK, "GET", pb+"/release%2F%2A", nil, admin)
	c.do(http.StatusNotFound, "GET", pb+"/release%2F1", nil, admin)
	c.do(http.StatusNoContent, "DELETE", pb+"/release%2F%2A", nil, admin)
	c.do(http.StatusNotFound, "DELETE", pb+"/release%2F%2A", nil, admin)
	pt := path("/api/v4/projects/%d/protected_tags", proj.ID)
	c.do(http.StatusCreated, "POST", pt, jsonBody(t, map[string]any{"name": "v*", "create_access_level": 30}), admin)
	c.do(http.StatusOK, "GET", pt, nil, admin)
	c.do(http.StatusOK, "GET", pt+"/v%2A", nil, admin)
	c.do(http.StatusNoContent, "DELETE", pt+"/v%2A", nil, admin)
	c.do(http.StatusNotFound, "GET", pt+"/v%2A", nil, admin)

	// ---- runners: create (JSON and form), verify, list, show, update
	var r1 api.RunnerCreated
	c.decode(&r1, http.StatusCreated, "POST", "/api/v4/user/runners", jsonBody(t, map[string]any{
		"description": "contract runner", "tag_list": []string{"contract"}, "run_untagged": true, "paused": false}), admin)
	var r2 api.RunnerCreated
	c.decode(&r2, http.StatusCreated, "POST", "/api/v4/user/runners", formBody(url.Values{
		"description": {"form runner"}, "tag_list": {"a, b"}, "run_untagged": {"false"}, "paused": {"true"}}), admin)
	c.do(http.StatusBadRequest, "POST", "/api/v4/user/runners", jsonBody(t, map[string]any{"descripton": "typo"}), admin, invalid)
	c.do(http.StatusBadRequest, "POST", "/api/v4/user/runners", formBody(url.Values{"paused": {"maybe"}}), admin, invalid)
	c.do(http.StatusRequestEntityTooLarge, "POST", "/api/v4/user/runners",
		jsonBody(t, map[string]any{"description": strings.Repeat("x", 70<<10)}), admin, invalid)

	const systemID = "s_0123456789ab"
	var verified api.VerifyResponse
	c.decode(&verified, http.StatusOK, "POST", "/api/v4/runners/verify",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "info": runnerInfo(true)}))
	if verified.ID != r1.ID || verified.Token != r1.Token || verified.TokenExpiresAt != nil {
		t.Errorf("verify = %+v, want id %d, the same token and a null expiry", verified, r1.ID)
	}
	c.do(http.StatusOK, "POST", "/api/v4/runners/verify",
		jsonBody(t, map[string]any{"system_id": "s_header000001"}), header("RUNNER-TOKEN", r2.Token))
	c.do(http.StatusForbidden, "POST", "/api/v4/runners/verify",
		jsonBody(t, map[string]any{"token": "glrt-00000000000000000000000000000000", "system_id": systemID}))
	c.do(http.StatusBadRequest, "POST", "/api/v4/runners/verify", rawBody("application/json", []byte(`{"token":`)), invalid)
	c.do(http.StatusBadRequest, "POST", "/api/v4/runners/verify",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": "not a system id!"}), invalid)
	c.do(http.StatusRequestEntityTooLarge, "POST", "/api/v4/runners/verify", jsonBody(t, map[string]any{
		"token": r1.Token, "system_id": systemID, "info": map[string]any{"name": strings.Repeat("x", 70<<10)}}))

	var page []api.Runner
	resp = c.decode(&page, http.StatusOK, "GET", "/api/v4/runners?page=1&per_page=1", nil, admin)
	wantHeader(t, "runners page 1", resp, "X-Total", "2")
	wantHeader(t, "runners page 1", resp, "X-Next-Page", "2")
	if len(page) != 1 || page[0].ID != r1.ID || len(page[0].Managers) != 1 {
		t.Errorf("runners page 1 = %+v, want runner %d with its manager", page, r1.ID)
	}
	resp = c.decode(&page, http.StatusOK, "GET", "/api/v4/runners?page=2&per_page=1", nil, admin)
	wantHeader(t, "runners page 2", resp, "X-Page", "2")
	wantHeader(t, "runners page 2", resp, "X-Next-Page", "")
	c.do(http.StatusBadRequest, "GET", "/api/v4/runners?per_page=0", nil, admin, invalid)

	var shown api.Runner
	c.decode(&shown, http.StatusOK, "GET", path("/api/v4/runners/%d", r1.ID), nil, admin)
	if len(shown.Managers) != 1 || shown.Managers[0].SystemID != systemID || !shown.Managers[0].Features["two_phase_job_commit"] {
		t.Errorf("runner managers = %+v, want %s with two_phase_job_commit", shown.Managers, systemID)
	}
	c.do(http.StatusNotFound, "GET", "/api/v4/runners/999999", nil, admin)
	c.do(http.StatusBadRequest, "GET", "/api/v4/runners/0", nil, admin, invalid)

	var updated api.Runner
	c.decode(&updated, http.StatusOK, "PUT", path("/api/v4/runners/%d", r2.ID),
		formBody(url.Values{"tag_list[]": {"x", "y"}, "paused": {"true"}}), admin)
	if !updated.Paused || strings.Join(updated.TagList, ",") != "x,y" {
		t.Errorf("form update: paused=%v tags=%v, want paused x,y", updated.Paused, updated.TagList)
	}
	c.decode(&updated, http.StatusOK, "PUT", path("/api/v4/runners/%d", r1.ID),
		jsonBody(t, map[string]any{"description": "contract runner (json)", "run_untagged": "true", "tag_list": "contract"}), admin)
	if !updated.RunUntagged || updated.Paused {
		t.Errorf("json update: %+v, want run_untagged and not paused", updated)
	}
	c.do(http.StatusNotFound, "PUT", "/api/v4/runners/999999", jsonBody(t, map[string]any{"paused": true}), admin)
	c.do(http.StatusBadRequest, "PUT", path("/api/v4/runners/%d", r1.ID), jsonBody(t, map[string]any{"pause": true}), admin, invalid)

	// ---- pipeline and the two-phase flag for its project
	var p api.Pipeline
	c.decode(&p, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"ref": "main", "stages": []string{"build", "test"},
		"jobs": []any{
			map[string]any{
				"name": "compile", "stage": "build", "script": "echo compile", "after_script": []string{"echo done"},
				"variables": map[string]any{"GIT_STRATEGY": "none", "N": 3, "SECRET": map[string]any{"value": "s3cr3t", "masked": true}},
				"timeout":   "1h 30m",
				"retry":     map[string]any{"max": 1, "when": "script_failure"},
			},
			map[string]any{"name": "unit", "stage": "test", "script": []string{"echo unit"}, "retry": 1,
				"allow_failure": true, "timeout": 600},
		}}), admin)
	if len(p.Jobs) != 2 || p.Jobs[0].Status != "pending" || p.Jobs[1].Status != "created" {
		t.Fatalf("pipeline jobs = %+v, want compile pending and unit created", p.Jobs)
	}
	compile, unit := p.Jobs[0].ID, p.Jobs[1].ID
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"stages": []string{"build"}, "jobs": []any{map[string]any{"name": "x", "stage": "nope", "script": "true"}}}), admin)
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"jobs": []any{map[string]any{"name": "x", "scrpt": "true"}}}), admin, invalid)
	// GitLab's form body names a ref: a pipeline from the repository, which this project
	// has none of.
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/pipeline", projectID),
		formBody(url.Values{"ref": {"main"}}), admin)

	var flag struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	c.decode(&flag, http.StatusCreated, "POST", "/api/v4/features/allow_runner_job_acknowledgement",
		jsonBody(t, map[string]any{"value": true, "project": strconv.Itoa(projectID)}), admin)
	if flag.State != "conditional" {
		t.Errorf("flag state = %q, want conditional", flag.State)
	}
	inst.WaitFlags(t)

	// ---- runner flow, two-phase: request, keep-alive, ack, trace, final update
	idle := jsonBody(t, map[string]any{"token": r2.Token, "system_id": "s_paused000001", "info": runnerInfo(true)})
	resp, _ = c.do(http.StatusNoContent, "POST", "/api/v4/jobs/request", idle) // r2 is paused
	if resp.Header.Get("X-GitLab-Last-Update") == "" {
		t.Error("204 without X-GitLab-Last-Update")
	}
	c.do(http.StatusForbidden, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": "glrt-00000000000000000000000000000000", "info": runnerInfo(true)}))
	c.do(http.StatusBadRequest, "POST", "/api/v4/jobs/request", rawBody("application/json", []byte(`[]`)), invalid)

	var job api.Job
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "info": runnerInfo(true)}))
	if job.ID != compile || job.RunnerInfo.Timeout != 5400 {
		t.Fatalf("assigned job %d with timeout %d, want %d with 5400", job.ID, job.RunnerInfo.Timeout, compile)
	}
	jt := job.Token

	var detail api.JobDetail
	c.decode(&detail, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d", projectID, compile), nil, admin)
	if detail.Status != "waiting_for_runner_ack" || !detail.TwoPhase || detail.Ack == nil {
		t.Fatalf("job after assignment: status %s two_phase %v ack %v, want waiting with an ack", detail.Status, detail.TwoPhase, detail.Ack)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/jobs/%d", projectID+1, compile), nil, admin)
	var listed []api.JobDetail
	c.decode(&listed, http.StatusOK, "GET", "/api/v4/admin/jobs?status=waiting_for_runner_ack", nil, admin)
	if len(listed) != 1 || listed[0].ID != compile {
		t.Errorf("waiting jobs = %+v, want only %d", listed, compile)
	}
	c.decode(&listed, http.StatusOK, "GET", "/api/v4/admin/jobs?scope=created&per_page=5", nil, admin)
	c.do(http.StatusBadRequest, "GET", "/api/v4/admin/jobs", nil, admin)
	c.do(http.StatusBadRequest, "GET", "/api/v4/admin/jobs?status=bogus", nil, admin, invalid)

	trace := "hello\n"
	resp, _ = c.do(http.StatusForbidden, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", []byte(trace)),
		jobToken(jt), header("Content-Range", contentRange(0, trace)))
	wantHeader(t, "trace before the ack", resp, "Job-Status", "waiting_for_runner_ack")

	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", compile),
		jsonBody(t, map[string]any{"token": jt, "state": "pending", "output": map[string]any{}}), jobToken(jt))
	wantHeader(t, "keep-alive", resp, "Job-Status", "waiting_for_runner_ack")
	c.do(http.StatusBadRequest, "PUT", path("/api/v4/jobs/%d", compile), jsonBody(t, map[string]any{"state": "success"}), jobToken(jt))

	// The ack, with the token in the body only, as the document allows.
	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", compile),
		jsonBody(t, map[string]any{"token": jt, "state": "running", "info": runnerInfo(true), "output": map[string]any{}}))
	wantHeader(t, "ack", resp, "Job-Status", "running")

	resp, _ = c.do(http.StatusAccepted, "PATCH", path("/api/v4/jobs/%d/trace?debug_trace=false", compile),
		rawBody("text/plain", []byte(trace)), jobToken(jt), header("Content-Range", contentRange(0, trace)))
	wantHeader(t, "trace patch", resp, "Range", "0-6")
	wantHeader(t, "trace patch", resp, "Job-Status", "running")
	resp, _ = c.do(http.StatusRequestedRangeNotSatisfiable, "PATCH", path("/api/v4/jobs/%d/trace", compile),
		rawBody("text/plain", []byte(trace)), jobToken(jt), header("Content-Range", contentRange(0, trace)))
	wantHeader(t, "stale trace patch", resp, "Range", "0-6")
	c.do(http.StatusBadRequest, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", []byte("x")),
		jobToken(jt), invalid)
	c.do(http.StatusBadRequest, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", []byte("abc")),
		jobToken(jt), header("Content-Range", "6-99"))
	resp, _ = c.do(http.StatusForbidden, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", []byte("x")),
		jobToken("glcbt-wrong"), header("Content-Range", "6-6"))
	if resp.Header.Get("Job-Status") != "" {
		t.Errorf("a wrong job token learned the job's status %q", resp.Header.Get("Job-Status"))
	}
	big := bytes.Repeat([]byte("y"), 1<<20+65<<10)
	c.do(http.StatusRequestEntityTooLarge, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", big),
		jobToken(jt), header("Content-Range", fmt.Sprintf("6-%d", 6+len(big)-1)))

	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", compile),
		jsonBody(t, map[string]any{"token": jt, "state": "running", "output": output(trace)}), jobToken(jt))
	wantHeader(t, "touch", resp, "Job-Status", "running")

	// Someone reads the log: the runner is asked for updates every 3 s.
	if _, b := c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d/trace", projectID, compile), nil, admin); string(b) != trace {
		t.Errorf("trace = %q, want %q", b, trace)
	}
	more := "world\n"
	resp, _ = c.do(http.StatusAccepted, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", []byte(more)),
		jobToken(jt), header("Content-Range", contentRange(len(trace), more)))
	wantHeader(t, "watched trace patch", resp, "X-GitLab-Trace-Update-Interval", "3")
	trace += more
	resp, _ = c.do(http.StatusAccepted, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", nil),
		jobToken(jt), header("Content-Range", fmt.Sprintf("%d-%d", len(trace), len(trace)-1)))
	wantHeader(t, "empty trace patch", resp, "Range", fmt.Sprintf("0-%d", len(trace)))

	c.do(http.StatusBadRequest, "PUT", path("/api/v4/jobs/%d", compile), jsonBody(t, map[string]any{"state": "bogus"}), jobToken(jt), invalid)
	c.do(http.StatusBadRequest, "PUT", path("/api/v4/jobs/%d", compile),
		jsonBody(t, map[string]any{"state": "failed", "failure_reason": "bogus"}), jobToken(jt), invalid)
	c.do(http.StatusBadRequest, "PUT", path("/api/v4/jobs/%d", compile), rawBody("application/json", []byte(`{"state":`)), jobToken(jt), invalid)
	c.do(http.StatusBadRequest, "PUT", "/api/v4/jobs/abc", jsonBody(t, map[string]any{"state": "running"}), jobToken(jt), invalid)

	final := jsonBody(t, map[string]any{"token": jt, "state": "success", "exit_code": 0, "output": output(trace)})
	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", compile), final, jobToken(jt))
	wantHeader(t, "final update", resp, "Job-Status", "success")
	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", compile), final, jobToken(jt))
	wantHeader(t, "repeated final update", resp, "Job-Status", "success")
	resp, _ = c.do(http.StatusForbidden, "PUT", path("/api/v4/jobs/%d", compile),
		jsonBody(t, map[string]any{"state": "running"}), jobToken(jt))
	wantHeader(t, "stale update", resp, "Job-Status", "success")
	resp, _ = c.do(http.StatusForbidden, "PATCH", path("/api/v4/jobs/%d/trace", compile), rawBody("text/plain", []byte("late")),
		jobToken(jt), header("Content-Range", contentRange(len(trace), "late")))
	wantHeader(t, "trace after the end", resp, "Job-Status", "success")
	c.do(http.StatusForbidden, "PUT", path("/api/v4/jobs/%d", compile), jsonBody(t, map[string]any{"state": "running"}), jobToken("glcbt-wrong"))
	c.do(http.StatusForbidden, "PUT", "/api/v4/jobs/99999999", jsonBody(t, map[string]any{"state": "running"}), jobToken(jt))

	var events []api.Event
	resp = c.decode(&events, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d/events?page=1&per_page=2", projectID, compile), nil, admin)
	wantHeader(t, "events page 1", resp, "X-Next-Page", "2")
	c.decode(&events, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d/events?per_page=100", projectID, compile), nil, admin)
	if got := jobapitest.EventTypes(events); !strings.Contains(got, "assigned,keepalive,acknowledged") || !strings.HasSuffix(got, "finished") {
		t.Errorf("events = %s, want assigned,keepalive,acknowledged … finished", got)
	}
	resp = c.decode(&events, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d/events?per_page=500", projectID, compile), nil, admin)
	wantHeader(t, "events per_page=500", resp, "X-Per-Page", "100")
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/jobs/99999999/events", projectID), nil, admin)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/jobs/99999999/trace", projectID), nil, admin)

	// ---- legacy flow for the next stage, then operator cancel and retry
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "info": runnerInfo(false)}))
	if job.ID != unit {
		t.Fatalf("second job = %d, want %d", job.ID, unit)
	}
	ut := job.Token
	c.decode(&detail, http.StatusOK, "POST", path("/api/v4/projects/%d/jobs/%d/cancel", projectID, unit), nil, admin)
	if detail.Status != "canceling" {
		t.Errorf("cancel of a running job: status %s, want canceling", detail.Status)
	}
	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", unit), jsonBody(t, map[string]any{"state": "running"}), jobToken(ut))
	wantHeader(t, "update while canceling", resp, "Job-Status", "canceling")
	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", unit),
		jsonBody(t, map[string]any{"state": "failed", "failure_reason": "job_canceled", "exit_code": 143}), jobToken(ut))
	wantHeader(t, "final update after cancel", resp, "Job-Status", "canceled")
	c.do(http.StatusConflict, "POST", path("/api/v4/projects/%d/jobs/%d/cancel", projectID, unit), nil, admin)

	var retried api.JobDetail
	c.decode(&retried, http.StatusCreated, "POST", path("/api/v4/projects/%d/jobs/%d/retry", projectID, unit), nil, admin)
	if retried.RetryOf == nil || *retried.RetryOf != unit || retried.Attempt != 2 || retried.Status != "pending" {
		t.Errorf("retry = %+v, want attempt 2 of %d, pending", retried, unit)
	}
	c.do(http.StatusConflict, "POST", path("/api/v4/projects/%d/jobs/%d/retry", projectID, unit), nil, admin)
	c.do(http.StatusConflict, "POST", path("/api/v4/projects/%d/jobs/%d/retry", projectID, retried.ID), nil, admin)
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/jobs/99999999/retry", projectID), nil, admin)
	c.decode(&detail, http.StatusOK, "POST", path("/api/v4/projects/%d/jobs/%d/cancel", projectID, retried.ID), nil, admin)
	if detail.Status != "canceled" {
		t.Errorf("cancel of a pending job: status %s, want canceled", detail.Status)
	}
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/jobs/99999999/cancel", projectID), nil, admin)

	// ---- a declined two-phase job: 200 on the decline, then 403 with Job-Status for the runner
	var p2 api.Pipeline
	c.decode(&p2, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"jobs": []any{map[string]any{"name": "provision", "stage": "test", "script": "true"}}}), admin)
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "info": runnerInfo(true)}))
	resp, _ = c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID),
		jsonBody(t, map[string]any{"state": "failed", "failure_reason": "runner_system_failure"}), jobToken(job.Token))
	wantHeader(t, "decline", resp, "Job-Status", "failed")
	resp, _ = c.do(http.StatusForbidden, "PUT", path("/api/v4/jobs/%d", job.ID),
		jsonBody(t, map[string]any{"state": "running"}), jobToken(job.Token))
	wantHeader(t, "ack after a decline", resp, "Job-Status", "failed")
	c.decode(&detail, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d", projectID, job.ID), nil, admin)
	if detail.FailureReason == nil || *detail.FailureReason != "runner_system_failure" || detail.RetriedBy == nil {
		t.Errorf("declined job: failure_reason %v retried_by %v, want runner_system_failure and a retry", detail.FailureReason, detail.RetriedBy)
	}

	// Its automatic retry is pending: cancel the pipeline so that it leaves the queue.
	c.decode(&p2, http.StatusOK, "POST", path("/api/v4/projects/%d/pipelines/%d/cancel", projectID, p2.ID), nil, admin)
	if p2.Status != "canceled" {
		t.Errorf("canceled pipeline status = %s", p2.Status)
	}

	// ---- GitLab's pipeline list, latest, variables, retry and delete
	var gp api.Pipeline
	c.decode(&gp, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"ref": "release", "variables": []map[string]string{{"key": "DEPLOY", "value": "yes"}},
		"jobs": []any{map[string]any{"name": "ship", "stage": "test", "script": "true"}}}), admin)
	c.decode(&gp, http.StatusOK, "POST", path("/api/v4/projects/%d/pipelines/%d/cancel", projectID, gp.ID), nil, admin)
	var pipelines []api.PipelineBasic
	resp = c.decode(&pipelines, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines?ref=release&scope=finished&per_page=1", projectID), nil, admin)
	if len(pipelines) != 1 || pipelines[0].ID != gp.ID {
		t.Errorf("pipelines of release = %+v, want %d", pipelines, gp.ID)
	}
	wantHeader(t, "pipelines list", resp, "X-Total", "1")
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/pipelines?scope=bogus", projectID), nil, admin, invalid)
	var latest api.Pipeline
	c.decode(&latest, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/latest?ref=release", projectID), nil, admin)
	if latest.ID != gp.ID {
		t.Errorf("latest of release = %d, want %d", latest.ID, gp.ID)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/latest?ref=nothing-here", projectID), nil, admin)
	var vars []api.PipelineVariableValue
	c.decode(&vars, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/variables", projectID, gp.ID), nil, admin)
	if len(vars) != 1 || vars[0].Key != "DEPLOY" || vars[0].Value != "yes" {
		t.Errorf("pipeline variables = %+v", vars)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/99999999/variables", projectID), nil, admin)
	c.decode(&gp, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipelines/%d/retry", projectID, gp.ID), nil, admin)
	if gp.Status != "pending" {
		t.Errorf("retried pipeline status = %s, want pending", gp.Status)
	}
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/pipelines/99999999/retry", projectID), nil, admin)
	c.do(http.StatusConflict, "DELETE", path("/api/v4/projects/%d/pipelines/%d", projectID, gp.ID), nil, admin)
	c.decode(&gp, http.StatusOK, "POST", path("/api/v4/projects/%d/pipelines/%d/cancel", projectID, gp.ID), nil, admin)
	c.do(http.StatusNoContent, "DELETE", path("/api/v4/projects/%d/pipelines/%d", projectID, gp.ID), nil, admin)
	c.do(http.StatusNotFound, "DELETE", path("/api/v4/projects/%d/pipelines/%d", projectID, gp.ID), nil, admin)

	// ---- needs, manual and delayed jobs: the pipeline is blocked on the manual job until
	// it is played; play of any other job is a 400
	var p4 api.Pipeline
	c.decode(&p4, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"stages": []string{"deploy", "verify"},
		"jobs": []any{
			map[string]any{"name": "deploy", "stage": "deploy", "script": "true", "when": "manual", "allow_failure": false},
			map[string]any{"name": "smoke", "stage": "verify", "script": "true", "needs": []any{map[string]any{"job": "deploy"}}},
			map[string]any{"name": "later", "stage": "verify", "script": "true", "when": "delayed", "start_in": "1 week", "needs": []string{}},
			map[string]any{"name": "flaky", "stage": "verify", "script": "true", "allow_failure": map[string]any{"exit_codes": []int{3}}},
		}}), admin)
	if p4.Status != "manual" {
		t.Errorf("pipeline with a blocking manual job: status %s, want manual", p4.Status)
	}
	byName := map[string]int64{}
	for _, j := range p4.Jobs {
		byName[j.Name] = j.ID
	}
	c.decode(&detail, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d", projectID, byName["later"]), nil, admin)
	if detail.Status != "scheduled" || detail.When != "delayed" || detail.ScheduledAt == nil {
		t.Errorf("delayed job = %+v, want scheduled with its scheduled_at", detail)
	}
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/jobs/%d/play", projectID, byName["smoke"]), nil, admin)
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/jobs/99999999/play", projectID), nil, admin)
	c.decode(&detail, http.StatusOK, "POST", path("/api/v4/projects/%d/jobs/%d/play", projectID, byName["deploy"]), nil, admin)
	if detail.Status != "pending" || detail.When != "manual" {
		t.Errorf("played job = %+v, want pending", detail)
	}
	// Cancel it, so that its jobs leave the queue.
	c.decode(&p4, http.StatusOK, "POST", path("/api/v4/projects/%d/pipelines/%d/cancel", projectID, p4.ID), nil, admin)

	// ---- a log over the trace limit: the job is dropped with trace_size_exceeded and a 403
	var p3 api.Pipeline
	c.decode(&p3, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"jobs": []any{map[string]any{"name": "chatty", "script": "yes"}}}), admin)
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "info": runnerInfo(false)}))
	if job.ID != p3.Jobs[0].ID {
		t.Fatalf("assigned job %d, want %d (chatty)", job.ID, p3.Jobs[0].ID)
	}
	chatty := strings.Repeat("z", 1<<20) // one full patch, far over the limit and its slack
	resp, _ = c.do(http.StatusForbidden, "PATCH", path("/api/v4/jobs/%d/trace", job.ID), rawBody("text/plain", []byte(chatty)),
		jobToken(job.Token), header("Content-Range", contentRange(0, chatty)))
	wantHeader(t, "trace over the limit", resp, "Job-Status", "failed")
	c.decode(&detail, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/%d", projectID, job.ID), nil, admin)
	if detail.FailureReason == nil || *detail.FailureReason != "trace_size_exceeded" {
		t.Errorf("job over the trace limit: failure_reason %v, want trace_size_exceeded", detail.FailureReason)
	}

	// ---- pipelines
	c.decode(&p, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d", projectID, p.ID), nil, admin)
	var pjobs []api.JobDetail
	// GitLab's pipeline jobs hide retried attempts unless include_retried.
	c.decode(&pjobs, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/jobs?include_retried=true", projectID, p.ID), nil, admin)
	if len(pjobs) != 3 {
		t.Errorf("pipeline jobs with retried ones = %d, want 3 (compile, unit and its retry)", len(pjobs))
	}
	c.decode(&pjobs, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/jobs", projectID, p.ID), nil, admin)
	if len(pjobs) != 2 {
		t.Errorf("pipeline jobs = %d, want 2 (compile, unit's retry)", len(pjobs))
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/999999", projectID), nil, admin)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/999999/jobs", projectID), nil, admin)
	c.do(http.StatusNotFound, "POST", path("/api/v4/projects/%d/pipelines/999999/cancel", projectID), nil, admin)

	// ---- artifacts: the runner's upload and a dependent job's download, the operator's calls
	artifactScenario(t, c, r1.Token, systemID)

	// ---- environments: a deploy, its stop job, the environments and deployments API
	environmentScenario(t, c, r1.Token, systemID)

	// ---- resource groups: two deploys of one group, the resource groups API
	resourceGroupScenario(t, c, r1.Token, systemID)

	// ---- child pipelines: trigger jobs, …/bridges, a child and its parent's cancel
	bridgeScenario(t, c, inst)

	// ---- GitLab's lists and reads for scripts: jobs, artifacts by ref, statuses, runners, user
	gitlabScenario(t, c, r1.Token, systemID)

	// ---- pushes: push settings, forges' webhooks, a poll of the remote
	pushScenario(t, c)

	// ---- trigger tokens and pipeline schedules: pipelines from the repository
	triggerScheduleScenario(t, c)
	usersScenario(t, c)
	membersScenario(t, c, proj.ID)

	// ---- project webhooks: the hooks API and a hook's delivery log
	hooksScenario(t, c, proj.ID)

	// ---- the operator audit log: every change above, newest first
	var audit []api.AuditEvent
	c.decode(&audit, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, admin)
	actions := map[string]bool{}
	for _, e := range audit {
		actions[e.Action] = true
	}
	for _, want := range []string{"runner_created", "runner_updated", "feature_set", "job_canceled", "job_retried", "job_played", "pipeline_canceled",
		"job_artifacts_deleted"} {
		if !actions[want] {
			t.Errorf("audit log lacks %s: %v", want, actions)
		}
	}

	// ---- the waiter: a finished pipeline answers at once; bad timeouts are 400s
	var waited api.PipelineWait
	c.decode(&waited, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/wait?timeout=5", projectID, p2.ID), nil, admin)
	if waited.Status != "canceled" || waited.JobsRemaining != 0 || len(waited.Finished) == 0 {
		t.Errorf("wait on the canceled pipeline = %+v, want canceled, 0 remaining, its finished jobs", waited)
	}
	c.decode(&waited, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/wait?timeout=0", projectID, p.ID), nil, admin)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/pipelines/%d/wait?timeout=-1", projectID, p.ID), nil, admin, invalid)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/999999/wait?timeout=0", projectID), nil, admin)

	// ---- idle polls: 204 with a queue version, then the cheap path echoing it
	resp, _ = c.do(http.StatusNoContent, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "info": runnerInfo(true)}))
	version := resp.Header.Get("X-GitLab-Last-Update")
	if version == "" {
		t.Fatal("idle poll without X-GitLab-Last-Update")
	}
	resp, _ = c.do(http.StatusNoContent, "POST", "/api/v4/jobs/request",
		jsonBody(t, map[string]any{"token": r1.Token, "system_id": systemID, "last_update": version, "info": runnerInfo(true)}))
	wantHeader(t, "cheap idle poll", resp, "X-GitLab-Last-Update", version)

	// ---- features
	var features []map[string]any
	c.decode(&features, http.StatusOK, "GET", "/api/v4/features", nil, admin)
	if len(features) != 1 || features[0]["name"] != "allow_runner_job_acknowledgement" {
		t.Errorf("features = %v", features)
	}
	c.decode(&flag, http.StatusCreated, "POST", "/api/v4/features/contract_flag",
		formBody(url.Values{"value": {"25"}, "key": {"percentage_of_actors"}}), admin)
	if flag.State != "conditional" {
		t.Errorf("percentage flag state = %q, want conditional", flag.State)
	}
	c.decode(&flag, http.StatusCreated, "POST", "/api/v4/features/contract_flag", jsonBody(t, map[string]any{"value": "true"}), admin)
	if flag.State != "on" {
		t.Errorf("flag state = %q, want on", flag.State)
	}
	c.do(http.StatusBadRequest, "POST", "/api/v4/features/contract_flag", jsonBody(t, map[string]any{"value": "maybe"}), admin)
	c.do(http.StatusBadRequest, "POST", "/api/v4/features/contract_flag",
		jsonBody(t, map[string]any{"value": true, "project": 1, "runner": 2}), admin)
	c.do(http.StatusBadRequest, "POST", "/api/v4/features/Not-A-Name", jsonBody(t, map[string]any{"value": true}), admin, invalid)
	c.do(http.StatusNoContent, "DELETE", "/api/v4/features/contract_flag", nil, admin)
	c.do(http.StatusNotFound, "DELETE", "/api/v4/features/contract_flag", nil, admin)

	// ---- runner life cycle, as gitlab-runner sends it
	c.do(http.StatusForbidden, "POST", "/api/v4/runners", jsonBody(t, map[string]any{"token": "wrong", "info": runnerInfo(false)}))
	var reg api.RunnerCreated
	c.decode(&reg, http.StatusCreated, "POST", "/api/v4/runners", jsonBody(t, map[string]any{
		"token": registrationToken, "description": "registered", "tag_list": "a, b", "run_untagged": false,
		"locked": true, "paused": false, "info": runnerInfo(false)}))
	c.do(http.StatusOK, "POST", "/api/v4/runners/verify", jsonBody(t, map[string]any{"token": reg.Token, "system_id": "s_lifecycle"}))
	c.do(http.StatusNoContent, "DELETE", "/api/v4/runners/managers",
		jsonBody(t, map[string]any{"token": reg.Token, "system_id": "s_lifecycle"}), header("RUNNER-TOKEN", reg.Token))
	c.do(http.StatusNotFound, "DELETE", "/api/v4/runners/managers", jsonBody(t, map[string]any{"token": reg.Token, "system_id": "s_lifecycle"}))
	c.do(http.StatusBadRequest, "DELETE", "/api/v4/runners/managers", jsonBody(t, map[string]any{"token": reg.Token}))
	var reset api.TokenReset
	c.decode(&reset, http.StatusCreated, "POST", "/api/v4/runners/reset_authentication_token", jsonBody(t, map[string]any{"token": reg.Token}))
	// The old token resets again within its rotation grace (an answer the runner lost).
	c.decode(&reset, http.StatusCreated, "POST", "/api/v4/runners/reset_authentication_token", jsonBody(t, map[string]any{"token": reg.Token}))
	c.decode(&reset, http.StatusCreated, "POST", path("/api/v4/runners/%d/reset_authentication_token", reg.ID), nil, admin)
	// The operator's reset revoked every earlier token.
	c.do(http.StatusForbidden, "POST", "/api/v4/runners/reset_authentication_token", jsonBody(t, map[string]any{"token": reg.Token}))
	c.do(http.StatusNotFound, "POST", "/api/v4/runners/999999/reset_authentication_token", nil, admin)
	c.do(http.StatusNoContent, "DELETE", "/api/v4/runners", jsonBody(t, map[string]any{"token": reset.Token}))
	c.do(http.StatusForbidden, "DELETE", "/api/v4/runners", jsonBody(t, map[string]any{"token": reset.Token}))
	c.do(http.StatusNoContent, "DELETE", path("/api/v4/runners/%d", r2.ID), nil, admin)
	c.do(http.StatusNotFound, "DELETE", path("/api/v4/runners/%d", r2.ID), nil, admin)

	// ---- .gitlab-ci.yml: lint, then a pipeline from the YAML text and from {"ci_config"}
	ciYAML := "stages: [build]\nbuild:\n  stage: build\n  script: echo from yaml\n  variables: {GIT_STRATEGY: none}\n"
	c.do(http.StatusOK, "POST", path("/api/v4/projects/%d/ci/lint", projectID), jsonBody(t, map[string]any{"content": ciYAML}), admin)
	c.do(http.StatusOK, "POST", path("/api/v4/projects/%d/ci/lint", projectID), &body{contentType: "application/yaml", data: []byte("a: [")}, admin)
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/ci/lint", projectID), jsonBody(t, map[string]any{"ref": "main"}), admin, invalid)
	c.do(http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline?ref=main", projectID), &body{contentType: "application/yaml", data: []byte(ciYAML)}, admin)
	c.do(http.StatusBadRequest, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{"ci_config": "build:\n  script: x\n  frobnicate: 1\n"}), admin)
}
