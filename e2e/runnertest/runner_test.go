package runnertest_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

func TestVerifyRunner(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	id, token := inst.CreateRunner(t, []string{"docker"}...)

	body := map[string]any{"token": token, "system_id": "s_0123456789ab", "info": jobapitest.RunnerInfo()}
	resp, b := jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", body)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	got := jobapitest.Decode[map[string]any](t, b)
	if got["id"] != float64(id) || id == 0 {
		t.Errorf("verify id %v, want %d (non-zero)", got["id"], id)
	}
	if got["token"] != token {
		t.Errorf("verify token %v, want the runner's token echoed", got["token"])
	}
	if v, ok := got["token_expires_at"]; !ok || v != nil {
		t.Errorf("token_expires_at = %v (present %v), want null", v, ok)
	}

	// The manager is upserted with what the runner reported.
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", id), nil, &rn)
	if len(rn.Managers) != 1 {
		t.Fatalf("managers %+v, want one", rn.Managers)
	}
	m := rn.Managers[0]
	if m.SystemID != "s_0123456789ab" || m.Version != "19.4.0" || m.Executor != "shell" || m.Architecture != "amd64" {
		t.Errorf("manager %+v", m)
	}
	if !m.Features["cancelable"] || m.Features["two_phase_job_commit"] || len(m.Features) != len(jobapitest.RunnerFeatures(false)) {
		t.Errorf("manager features %v, want %v", m.Features, jobapitest.RunnerFeatures(false))
	}
	if m.ContactedAt.IsZero() || rn.ContactedAt == nil {
		t.Errorf("contacted_at not recorded: manager %v runner %v", m.ContactedAt, rn.ContactedAt)
	}
	if m.IPAddress != "127.0.0.1" {
		t.Errorf("manager ip_address %q, want the runner's peer address 127.0.0.1", m.IPAddress)
	}

	// Verifying again (new version) updates the same manager; another system_id adds one.
	info := jobapitest.RunnerInfo()
	info["version"] = "19.5.0"
	resp, b = jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", map[string]any{"token": token, "system_id": "s_0123456789ab", "info": info})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	resp, b = jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", map[string]any{"token": token, "system_id": "r_other", "info": info})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", id), nil, &rn)
	if len(rn.Managers) != 2 || rn.Managers[0].Version != "19.5.0" || rn.Managers[1].SystemID != "r_other" {
		t.Errorf("managers after second verify: %+v", rn.Managers)
	}

	// The token in the RUNNER-TOKEN header alone is accepted too. Without info (as
	// gitlab-runner 17.9's verify, register --token and reset-token send it) the manager
	// keeps what it reported before.
	resp, b = jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", map[string]any{"system_id": "s_0123456789ab"}, "RUNNER-TOKEN", token)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", id), nil, &rn)
	if m := rn.Managers[0]; m.SystemID != "s_0123456789ab" || m.Version != "19.5.0" || m.Executor != "shell" ||
		m.Architecture != "amd64" || !m.Features["cancelable"] || len(m.Features) != len(jobapitest.RunnerFeatures(false)) {
		t.Errorf("manager after a verify without info: %+v, want what the runner reported before", m)
	}

	before := jobapitest.RowCounts(t, inst)
	for _, bad := range []string{"glrt-this-token-does-not-exist", "glrt-", "", "x"} {
		resp, b = jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", map[string]any{"token": bad, "system_id": "s_0123456789ab"})
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
	}
	if after := jobapitest.RowCounts(t, inst); !jobapitest.SameCounts(before, after) {
		t.Errorf("rejected verifies wrote rows: %v → %v", before, after)
	}
}

func TestJobRequestPayload(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	p := inst.CreatePipeline(t, 42, []string{"build", "test"}, jobapitest.Job{
		"name": "compile", "stage": "build",
		"script":       []string{"echo hello", "make"},
		"after_script": []string{"echo bye"},
		"variables":    map[string]any{"GIT_STRATEGY": "none", "SECRET": map[string]any{"value": "s3cr3t", "masked": true}},
		"timeout":      "1h 30m",
	}, jobapitest.Job{"name": "unit", "stage": "test", "script": "go test"})

	resp, b := jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", "")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	job := jobapitest.Decode[api.Job](t, b)
	raw := jobapitest.Decode[map[string]any](t, b)
	compile := jobapitest.JobByName(t, p, "compile")

	if job.ID != compile.ID || job.JobInfo.ID != compile.ID || job.JobInfo.Name != "compile" || job.JobInfo.Stage != "build" ||
		job.JobInfo.PipelineID != p.ID || job.JobInfo.ProjectID != 42 {
		t.Errorf("job_info %+v (id %d), want build %d of pipeline %d", job.JobInfo, job.ID, compile.ID, p.ID)
	}
	if len(job.Token) < 20 {
		t.Errorf("job token %q is too short", job.Token)
	}
	if job.RunnerInfo.Timeout != 5400 {
		t.Errorf("runner_info.timeout %d, want 5400 (1h 30m)", job.RunnerInfo.Timeout)
	}
	vars := map[string]api.JobVariable{}
	for _, v := range job.Variables {
		vars[v.Key] = v
	}
	want := map[string]string{
		"CI_JOB_ID": strconv.FormatInt(job.ID, 10), "CI_JOB_NAME": "compile", "CI_JOB_STAGE": "build",
		"CI_PIPELINE_ID": strconv.FormatInt(p.ID, 10), "CI_PROJECT_ID": "42", "CI_JOB_TOKEN": job.Token,
		"GIT_STRATEGY": "none", "SECRET": "s3cr3t",
	}
	for k, v := range want {
		if got, ok := vars[k]; !ok || got.Value != v {
			t.Errorf("variable %s = %+v (present %v), want value %q", k, got, ok, v)
		}
	}
	if !vars["CI_JOB_TOKEN"].Masked || vars["CI_JOB_TOKEN"].Public {
		t.Errorf("CI_JOB_TOKEN must be masked and not public: %+v", vars["CI_JOB_TOKEN"])
	}
	if !vars["SECRET"].Masked || !vars["GIT_STRATEGY"].Public {
		t.Errorf("operator variables: SECRET %+v, GIT_STRATEGY %+v", vars["SECRET"], vars["GIT_STRATEGY"])
	}
	if len(job.Steps) != 2 {
		t.Fatalf("steps %+v, want script and after_script", job.Steps)
	}
	if s := job.Steps[0]; s.Name != "script" || !slices.Equal(s.Script, []string{"echo hello", "make"}) || s.When != "on_success" || s.Timeout != 5400 {
		t.Errorf("script step %+v", s)
	}
	if s := job.Steps[1]; s.Name != "after_script" || !slices.Equal(s.Script, []string{"echo bye"}) || s.When != "always" {
		t.Errorf("after_script step %+v", s)
	}
	// Arrays the runner iterates are present and empty, never null.
	for _, k := range []string{"services", "artifacts", "cache", "credentials", "dependencies"} {
		if arr, ok := raw[k].([]any); !ok || len(arr) != 0 {
			t.Errorf("%s = %#v, want []", k, raw[k])
		}
	}
	if len(job.Features.FailureReasons) == 0 || !slices.Contains(job.Features.FailureReasons, "script_failure") {
		t.Errorf("features.failure_reasons %v", job.Features.FailureReasons)
	}
	if job.GitInfo.RepoURL == "" || job.GitInfo.Sha == "" || job.GitInfo.Ref != "main" {
		t.Errorf("git_info %+v", job.GitInfo)
	}

	// The build is running on this runner (legacy: no ack phase).
	d := inst.Job(t, 42, job.ID)
	if d.Status != "running" || d.TwoPhase || d.Runner == nil || d.RunnerManager == nil ||
		d.RunnerManager.SystemID != "s_0123456789ab" || d.StartedAt == nil {
		t.Errorf("job after assignment: %+v", d)
	}
	// The second stage waits; nothing else is handed out.
	if st := jobapitest.JobStatuses(inst.Pipeline(t, p)); st["unit"] != "created" {
		t.Errorf("later stage %v, want created", st)
	}
	jobapitest.WantNoJob(t, inst.URL, token)
}

func TestJobRequestTagMatching(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	// A: docker+linux, no untagged; B: untagged only; C: docker only.
	_, tokA := inst.CreateRunner(t, []string{"docker", "linux"}...)
	_, tokB := inst.CreateRunner(t)
	_, tokC := inst.CreateRunner(t, []string{"docker"}...)
	p := inst.CreatePipeline(t, 1, []string{"test"},
		jobapitest.Job{"name": "both", "stage": "test", "script": "x", "tags": []string{"docker", "linux"}},
		jobapitest.Job{"name": "none", "stage": "test", "script": "x"},
		jobapitest.Job{"name": "docker", "stage": "test", "script": "x", "tags": []string{"docker"}},
		jobapitest.Job{"name": "gpu", "stage": "test", "script": "x", "tags": []string{"gpu"}},
	)
	ids := map[string]int64{}
	for _, j := range p.Jobs {
		ids[j.Name] = j.ID
	}
	// C cannot run "both" (no linux tag): it gets "docker".
	if j := jobapitest.TakeJob(t, inst.URL, tokC); j.ID != ids["docker"] {
		t.Errorf("C got %s, want docker", j.JobInfo.Name)
	}
	jobapitest.WantNoJob(t, inst.URL, tokC)
	// A's tags include both of "both"'s; the untagged job needs run_untagged.
	if j := jobapitest.TakeJob(t, inst.URL, tokA); j.ID != ids["both"] {
		t.Errorf("A got %s, want both", j.JobInfo.Name)
	}
	jobapitest.WantNoJob(t, inst.URL, tokA)
	if j := jobapitest.TakeJob(t, inst.URL, tokB); j.ID != ids["none"] {
		t.Errorf("B got %s, want none", j.JobInfo.Name)
	}
	jobapitest.WantNoJob(t, inst.URL, tokB)
	if st := jobapitest.JobStatuses(inst.Pipeline(t, p)); st["gpu"] != "pending" {
		t.Errorf("gpu job %s, want pending (no runner has the tag)", st["gpu"])
	}
}

func TestJobRequestPausedRunner(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	id, token := inst.CreateRunner(t)
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "j", "stage": "test", "script": "x"})

	resp, b := inst.Do(t, "PUT", fmt.Sprintf("/api/v4/runners/%d", id), map[string]any{"paused": true})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if rn := jobapitest.Decode[api.Runner](t, b); !rn.Paused || rn.Active {
		t.Errorf("runner after pause: %+v", rn)
	}
	resp, b = jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", "")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-GitLab-Last-Update") == "" {
		t.Fatalf("paused runner: %d %q, want 204 with X-GitLab-Last-Update; body %s",
			resp.StatusCode, resp.Header.Get("X-GitLab-Last-Update"), b)
	}
	// Unpausing (GitLab's older name, active=true) hands the job out at the next request.
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/runners/%d", id), map[string]any{"active": true})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	jobapitest.TakeJob(t, inst.URL, token)
}

func TestJobRequestOldestFirst(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	var want []int64
	for i := range 3 {
		p := inst.CreatePipeline(t, int64(10+i), []string{"test"},
			jobapitest.Job{"name": "a", "stage": "test", "script": "x"},
			jobapitest.Job{"name": "b", "stage": "test", "script": "x"})
		for _, j := range p.Jobs {
			want = append(want, j.ID)
		}
	}
	var got []int64
	for range want {
		got = append(got, jobapitest.TakeJob(t, inst.URL, token).ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("assignment order %v, want oldest first %v", got, want)
	}
	jobapitest.WantNoJob(t, inst.URL, token)
}

func TestJobRequestAuthAndMalformed(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "j", "stage": "test", "script": "x"})
	before := jobapitest.RowCounts(t, inst)

	for _, bad := range []string{"glrt-unknown-token-0000000", "glrt-", "", token + "x"} {
		resp, b := jobapitest.RequestJob(t, inst.URL, bad, "s_0123456789ab", "")
		jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
	}
	for name, body := range map[string]string{
		"truncated":     `{"token": "` + token + `"`,
		"not json":      `token=` + token,
		"trailing data": `{"token": "` + token + `"} {}`,
		"wrong type":    `{"token": "` + token + `", "info": {"features": {"cancelable": "yes"}}}`,
		"token number":  `{"token": 12345}`,
		"empty":         ``,
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := jobapitest.Send(t, inst.URL, "POST", "/api/v4/jobs/request", body)
			jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
		})
	}
	if after := jobapitest.RowCounts(t, inst); !jobapitest.SameCounts(before, after) {
		t.Errorf("rejected requests wrote rows: %v → %v", before, after)
	}
	// The job is still there for a well-formed request.
	jobapitest.TakeJob(t, inst.URL, token)
}

// A runner version of 255 bytes with a multi-byte character across the cut is stored,
// clipped on the character boundary, instead of a 400 "strings must not contain NUL".
func TestVerifyClipsLongStringsOnCharacters(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	id, token := inst.CreateRunner(t)
	info := jobapitest.RunnerInfo()
	info["version"] = strings.Repeat("a", 254) + "é"
	info["platform"] = strings.Repeat("é", 200)
	resp, b := jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", map[string]any{"token": token, "system_id": "s_utf8", "info": info})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", id), nil, &rn)
	if len(rn.Managers) != 1 || rn.Managers[0].Version != strings.Repeat("a", 254) || rn.Managers[0].Platform != strings.Repeat("é", 127) {
		t.Errorf("managers %+v: want the version and platform clipped to whole characters", rn.Managers)
	}
}

// One runner token may not create manager rows without end: past the cap, verify and job
// requests from a new system_id get 429 with a message; known managers carry on.
func TestManagersPerRunnerCapped(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.MaxManagersPerRunner = 3 }})
	id, token := inst.CreateRunner(t)
	verify := func(systemID string) (*http.Response, []byte) {
		return jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify", map[string]any{"token": token, "system_id": systemID, "info": jobapitest.RunnerInfo()})
	}
	for i := 0; i < 3; i++ {
		resp, b := verify(fmt.Sprintf("s_cap%d", i))
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
	}
	resp, b := verify("s_cap3")
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusTooManyRequests); !strings.Contains(msg, "3") || !strings.Contains(msg, "manager") {
		t.Errorf("message %q: want one naming the limit of 3 managers", msg)
	}
	resp, b = jobapitest.RequestJob(t, inst.URL, token, "s_cap4", "")
	jobapitest.WantJSONError(t, resp, b, http.StatusTooManyRequests)
	// Known managers are not affected.
	resp, b = verify("s_cap1")
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	resp, b = jobapitest.RequestJob(t, inst.URL, token, "s_cap2", "")
	jobapitest.WantStatus(t, resp, b, http.StatusNoContent)
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM runner_managers WHERE runner_id = $1", id); n != 3 {
		t.Errorf("%d manager rows, want 3", n)
	}
}
