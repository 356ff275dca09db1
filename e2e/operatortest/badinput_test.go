package operatortest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// chunked hides a body's length, so the client sends it chunked and only the server's
// MaxBytesReader (not the Content-Length check) can stop it.
type chunked struct{ io.Reader }

// TestBadInput sends malformed, mistyped, oversized and hostile input to every endpoint:
// each answer must be a 4xx with a JSON {"message"}, never a 5xx, and write nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runnerID, token := inst.CreateRunner(t)
	p := inst.CreatePipeline(t, 1, []string{"test"},
		jobapitest.Job{"name": "run", "stage": "test", "script": "x"},
		jobapitest.Job{"name": "wait", "stage": "test", "script": "x"})
	job := jobapitest.TakeJob(t, inst.URL, token)
	waitID := jobapitest.JobByName(t, p, "wait").ID

	const form = "application/x-www-form-urlencoded"
	big := func(n int) string { return strings.Repeat("x", n) }
	badIDs := []string{"-1", "0", "abc", "99999999999999999999", "1.5", "1e3", "0x10", "%20", "1%20OR%201=1", "1;DROP%20TABLE%20builds"}
	jobPut := func(id string) string { return "/api/v4/jobs/" + id }

	type call struct {
		name   string
		method string
		path   string
		body   any
		hdr    []string // added to the request; operator calls get PRIVATE-TOKEN unless runner is set
		runner bool     // runner endpoint: no PRIVATE-TOKEN
		want   int      // 0: any 4xx
	}
	var calls []call
	add := func(c call) { calls = append(calls, c) }

	// --- runner API ----------------------------------------------------------------------
	for _, ep := range []string{"/api/v4/runners/verify", "/api/v4/jobs/request"} {
		add(call{"malformed", "POST", ep, `{"token": "` + token + `"`, nil, true, 400})
		add(call{"not JSON", "POST", ep, `token=` + token, nil, true, 400})
		add(call{"array", "POST", ep, `[1,2]`, nil, true, 400})
		add(call{"token number", "POST", ep, `{"token": 123}`, nil, true, 400})
		add(call{"info string", "POST", ep, `{"token": "` + token + `", "info": "x"}`, nil, true, 400})
		add(call{"features not bool", "POST", ep, `{"token": "` + token + `", "info": {"features": {"cancelable": 1}}}`, nil, true, 400})
		add(call{"system_id too long", "POST", ep, map[string]any{"token": token, "system_id": big(129)}, nil, true, 400})
		add(call{"system_id SQL", "POST", ep, map[string]any{"token": token, "system_id": "s_1'; DROP TABLE runners; --"}, nil, true, 400})
		add(call{"system_id number", "POST", ep, `{"token": "` + token + `", "system_id": 5}`, nil, true, 400})
		add(call{"NUL in info", "POST", ep, `{"token": "` + token + `", "system_id": "s_nul", "info": {"version": "1\u0000"}}`, nil, true, 400})
		add(call{"body over 64 KiB", "POST", ep, map[string]any{"token": token, "info": map[string]any{"name": big(70 << 10)}}, nil, true, 413})
		add(call{"chunked body over 64 KiB", "POST", ep, chunked{strings.NewReader(`{"token": "` + token + `", "x": "` + big(70<<10) + `"}`)}, nil, true, 413})
		add(call{"unknown token", "POST", ep, map[string]any{"token": "glrt-' OR '1'='1"}, nil, true, 403})
		add(call{"huge token", "POST", ep, map[string]any{"token": "glrt-" + big(10000)}, nil, true, 403})
	}
	add(call{"last_update too long", "POST", "/api/v4/jobs/request", map[string]any{"token": token, "last_update": big(129)}, nil, true, 400})
	add(call{"last_update number", "POST", "/api/v4/jobs/request", `{"token": "` + token + `", "last_update": 7}`, nil, true, 400})

	jobHdr := []string{"JOB-TOKEN", job.Token}
	for _, id := range badIDs {
		add(call{"PUT job id " + id, "PUT", jobPut(id), map[string]any{"state": "running"}, jobHdr, true, 0})
		add(call{"PATCH trace job id " + id, "PATCH", jobPut(id) + "/trace", "x", append([]string{"Content-Range", "0-0"}, jobHdr...), true, 0})
	}
	jp := jobPut(fmt.Sprint(job.ID))
	add(call{"update malformed", "PUT", jp, `{"state": "running"`, jobHdr, true, 400})
	add(call{"update empty body", "PUT", jp, ``, jobHdr, true, 400})
	add(call{"update state number", "PUT", jp, `{"state": 1}`, jobHdr, true, 400})
	add(call{"update state empty", "PUT", jp, `{"state": ""}`, jobHdr, true, 400})
	add(call{"update state unknown", "PUT", jp, `{"state": "finished"}`, jobHdr, true, 400})
	add(call{"update state SQL", "PUT", jp, `{"state": "success'; --"}`, jobHdr, true, 400})
	add(call{"update exit_code string", "PUT", jp, `{"state": "failed", "exit_code": "1"}`, jobHdr, true, 400})
	add(call{"update exit_code huge", "PUT", jp, `{"state": "failed", "exit_code": 1e20}`, jobHdr, true, 400})
	add(call{"update reason unknown", "PUT", jp, `{"state": "failed", "failure_reason": "oops"}`, jobHdr, true, 400})
	add(call{"update reason huge", "PUT", jp, map[string]any{"state": "failed", "failure_reason": big(60000)}, jobHdr, true, 400})
	add(call{"update output wrong type", "PUT", jp, `{"state": "running", "output": "x"}`, jobHdr, true, 400})
	add(call{"update body over 64 KiB", "PUT", jp, map[string]any{"state": "running", "checksum": big(70 << 10)}, jobHdr, true, 413})
	add(call{"update wrong token", "PUT", jp, map[string]any{"state": "success"}, []string{"JOB-TOKEN", "glcbt-' OR 1=1 --"}, true, 403})
	add(call{"update other build's id", "PUT", jobPut(fmt.Sprint(waitID)), map[string]any{"state": "running"}, jobHdr, true, 403})
	add(call{"trace over the route limit", "PATCH", jp + "/trace", big(1<<20 + 65<<10),
		append([]string{"Content-Range", fmt.Sprintf("0-%d", 1<<20+65<<10-1)}, jobHdr...), true, 413})
	add(call{"chunked trace over the route limit", "PATCH", jp + "/trace", chunked{strings.NewReader(big(1<<20 + 65<<10))},
		append([]string{"Content-Range", fmt.Sprintf("0-%d", 1<<20+65<<10-1)}, jobHdr...), true, 413})
	add(call{"trace range huge", "PATCH", jp + "/trace", "x", append([]string{"Content-Range", "999999999999999999999-999999999999999999999"}, jobHdr...), true, 400})
	add(call{"trace range text", "PATCH", jp + "/trace", "x", append([]string{"Content-Range", "a-b"}, jobHdr...), true, 400})
	add(call{"trace wrong token", "PATCH", jp + "/trace", "x", []string{"Content-Range", "0-0", "JOB-TOKEN", "nope"}, true, 403})

	// --- operator API --------------------------------------------------------------------
	ur := "/api/v4/user/runners"
	add(call{"runner malformed", "POST", ur, `{"description": `, nil, false, 400})
	add(call{"runner unknown field", "POST", ur, `{"descripton": "x"}`, nil, false, 400})
	add(call{"runner paused maybe", "POST", ur, `{"paused": "maybe"}`, nil, false, 400})
	add(call{"runner paused number", "POST", ur, `{"paused": 2}`, nil, false, 400})
	add(call{"runner tag_list number", "POST", ur, `{"tag_list": 5}`, nil, false, 400})
	add(call{"runner tag_list of numbers", "POST", ur, `{"tag_list": [1, 2]}`, nil, false, 400})
	add(call{"runner description number", "POST", ur, `{"description": 5}`, nil, false, 400})
	add(call{"runner description too long", "POST", ur, map[string]any{"description": big(1025)}, nil, false, 400})
	add(call{"runner tag too long", "POST", ur, map[string]any{"tag_list": []string{big(256)}}, nil, false, 400})
	add(call{"runner empty tag", "POST", ur, map[string]any{"tag_list": []string{"a", ""}}, nil, false, 400})
	add(call{"runner too many tags", "POST", ur, map[string]any{"tag_list": manyTags(51)}, nil, false, 400})
	add(call{"runner NUL", "POST", ur, `{"description": "a\u0000"}`, nil, false, 400})
	add(call{"runner body over 64 KiB", "POST", ur, map[string]any{"description": big(70 << 10)}, nil, false, 413})
	add(call{"runner form unknown field", "POST", ur, "colour=red", []string{"Content-Type", form}, false, 400})
	add(call{"runner form paused maybe", "POST", ur, "paused=maybe", []string{"Content-Type", form}, false, 400})
	add(call{"runner form description too long", "POST", ur, "description=" + big(1025), []string{"Content-Type", form}, false, 400})
	add(call{"runner form NUL", "POST", ur, "description=a%00b", []string{"Content-Type", form}, false, 400})
	add(call{"runner form malformed", "POST", ur, "description=%zz", []string{"Content-Type", form}, false, 400})
	for _, q := range []string{"page=0", "page=-1", "page=abc", "per_page=0", "per_page=x", "page=99999999999999999999", "per_page=1e3"} {
		add(call{"runners list " + q, "GET", "/api/v4/runners?" + q, nil, nil, false, 400})
	}
	for _, id := range badIDs {
		add(call{"runner show " + id, "GET", "/api/v4/runners/" + id, nil, nil, false, 0})
		add(call{"runner update " + id, "PUT", "/api/v4/runners/" + id, map[string]any{"paused": true}, nil, false, 0})
	}
	add(call{"runner show missing", "GET", "/api/v4/runners/9223372036854775807", nil, nil, false, 404})
	add(call{"runner update missing", "PUT", "/api/v4/runners/9223372036854775807", map[string]any{"paused": true}, nil, false, 404})
	rp := fmt.Sprintf("/api/v4/runners/%d", runnerID)
	add(call{"runner update malformed", "PUT", rp, `{"paused": tru`, nil, false, 400})
	add(call{"runner update wrong type", "PUT", rp, `{"run_untagged": [true]}`, nil, false, 400})
	add(call{"runner update tag too long", "PUT", rp, map[string]any{"tag_list": []string{big(300)}}, nil, false, 400})
	add(call{"runner update NUL tag", "PUT", rp, `{"tag_list": ["\u0000"]}`, nil, false, 400})

	def := map[string]any{"stages": []string{"test"}, "jobs": []any{map[string]any{"name": "a", "script": "x"}}}
	for _, id := range badIDs {
		add(call{"pipeline create project " + id, "POST", "/api/v4/projects/" + id + "/pipeline", def, nil, false, 0})
	}
	add(call{"pipeline body over 8 MiB", "POST", "/api/v4/projects/1/pipeline",
		map[string]any{"stages": []string{"test"}, "jobs": []any{map[string]any{"name": "a", "script": []string{big(8 << 20)}}}}, nil, false, 413})
	add(call{"pipeline chunked body over 8 MiB", "POST", "/api/v4/projects/1/pipeline",
		chunked{strings.NewReader(`{"stages": ["test"], "ref": "` + big(9<<20) + `"}`)}, nil, false, 413})
	add(call{"pipeline NUL in name", "POST", "/api/v4/projects/1/pipeline",
		`{"stages": ["test"], "jobs": [{"name": "a\u0000", "script": "x"}]}`, nil, false, 400})
	add(call{"pipeline NUL in variable", "POST", "/api/v4/projects/1/pipeline",
		`{"stages": ["test"], "jobs": [{"name": "a", "script": "x", "variables": {"A": "\u0000"}}]}`, nil, false, 400})
	for name, origin := range map[string]string{
		"source unknown":            `"source": "merge_request_event"`,
		"source number":             `"source": 1`,
		"before_sha short":          `"before_sha": "abc"`,
		"before_sha uppercase":      `"before_sha": "` + strings.Repeat("A", 40) + `"`,
		"variables string":          `"variables": "A=1"`,
		"variable without value":    `"variables": [{"key": "A"}]`,
		"variable unknown field":    `"variables": [{"key": "A", "value": "1", "masked": true}]`,
		"variable type unknown":     `"variables": [{"key": "A", "value": "1", "variable_type": "secret"}]`,
		"variable key bad":          `"variables": [{"key": "A-B", "value": "1"}]`,
		"variable key twice":        `"variables": [{"key": "A", "value": "1"}, {"key": "A", "value": "2"}]`,
		"variable map null":         `"variables": {"A": null}`,
		"variable map object":       `"variables": {"A": {"value": "1"}}`,
		"variable NUL":              `"variables": {"A": "\u0000"}`,
		"variable value over 64KiB": `"variables": {"A": "` + big(65<<10) + `"}`,
	} {
		add(call{"pipeline " + name, "POST", "/api/v4/projects/1/pipeline",
			`{"stages": ["test"], "jobs": [{"name": "a", "script": "x"}], ` + origin + `}`, nil, false, 400})
	}

	for name, j := range map[string]string{
		"when unknown":                `"when": "sometimes"`,
		"when never":                  `"when": "never"`,
		"delayed without start_in":    `"when": "delayed"`,
		"start_in without delayed":    `"start_in": 30`,
		"start_in past a week":        `"when": "delayed", "start_in": "8 days"`,
		"start_in words":              `"when": "delayed", "start_in": "soon"`,
		"start_in unknown unit":       `"when": "delayed", "start_in": "5 lightyears"`,
		"needs not a list":            `"needs": "a"`,
		"need without job":            `"needs": [{"artifacts": true}]`,
		"need unknown key":            `"needs": [{"job": "a", "stage": "x"}]`,
		"allow_failure string":        `"allow_failure": "yes"`,
		"allow_failure no exit codes": `"allow_failure": {"exit_codes": []}`,
		"allow_failure unknown key":   `"allow_failure": {"codes": [1]}`,
	} {
		add(call{"pipeline " + name, "POST", "/api/v4/projects/1/pipeline",
			`{"stages": ["test"], "jobs": [{"name": "b", "script": "x", ` + j + `}]}`, nil, false, 400})
	}

	pp := jobapitest.PipelinePath(p.ProjectID, p.ID)
	for _, id := range badIDs {
		add(call{"pipeline show " + id, "GET", "/api/v4/projects/1/pipelines/" + id, nil, nil, false, 0})
		add(call{"pipeline show project " + id, "GET", fmt.Sprintf("/api/v4/projects/%s/pipelines/%d", id, p.ID), nil, nil, false, 0})
		add(call{"pipeline jobs " + id, "GET", "/api/v4/projects/1/pipelines/" + id + "/jobs", nil, nil, false, 0})
		add(call{"pipeline cancel " + id, "POST", "/api/v4/projects/1/pipelines/" + id + "/cancel", nil, nil, false, 0})
		for _, sub := range []string{"", "/trace", "/events"} {
			add(call{"job get" + sub + " " + id, "GET", "/api/v4/projects/1/jobs/" + id + sub, nil, nil, false, 0})
		}
		add(call{"job cancel " + id, "POST", "/api/v4/projects/1/jobs/" + id + "/cancel", nil, nil, false, 0})
		add(call{"job retry " + id, "POST", "/api/v4/projects/1/jobs/" + id + "/retry", nil, nil, false, 0})
		add(call{"job play " + id, "POST", "/api/v4/projects/1/jobs/" + id + "/play", nil, nil, false, 0})
	}
	add(call{"pipeline missing", "GET", "/api/v4/projects/1/pipelines/9223372036854775807", nil, nil, false, 404})
	add(call{"pipeline of another project", "GET", strings.Replace(pp, "/projects/1/", "/projects/2/", 1), nil, nil, false, 404})
	add(call{"pipeline cancel of another project", "POST", strings.Replace(pp, "/projects/1/", "/projects/2/", 1) + "/cancel", nil, nil, false, 404})
	for _, sub := range []string{"", "/trace", "/events"} {
		add(call{"job missing" + sub, "GET", "/api/v4/projects/1/jobs/9223372036854775807" + sub, nil, nil, false, 404})
		add(call{"job of another project" + sub, "GET", fmt.Sprintf("/api/v4/projects/2/jobs/%d%s", job.ID, sub), nil, nil, false, 404})
	}
	add(call{"job cancel of another project", "POST", fmt.Sprintf("/api/v4/projects/2/jobs/%d/cancel", waitID), nil, nil, false, 404})
	add(call{"job retry of another project", "POST", fmt.Sprintf("/api/v4/projects/2/jobs/%d/retry", job.ID), nil, nil, false, 404})
	add(call{"job retry while running", "POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/retry", job.ID), nil, nil, false, 409})
	add(call{"job play of a running job", "POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/play", job.ID), nil, nil, false, 400})
	add(call{"job play of a pending job", "POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/play", waitID), nil, nil, false, 400})
	add(call{"job play of another project", "POST", fmt.Sprintf("/api/v4/projects/2/jobs/%d/play", waitID), nil, nil, false, 404})
	add(call{"job play missing", "POST", "/api/v4/projects/1/jobs/9223372036854775807/play", nil, nil, false, 404})
	add(call{"events page bad", "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/events?page=x", job.ID), nil, nil, false, 400})
	add(call{"admin jobs status SQL", "GET", "/api/v4/admin/jobs?status=pending%27%20OR%20%271%27=%271", nil, nil, false, 400})
	add(call{"unknown route", "GET", "/api/v4/nope", nil, nil, false, 404})
	add(call{"wrong method", "DELETE", "/api/v4/jobs/request", nil, nil, true, 405})

	for _, c := range calls {
		t.Run(c.name+" "+c.method+" "+c.path[:min(len(c.path), 60)], func(t *testing.T) {
			hdr := c.hdr
			if !c.runner {
				hdr = append([]string{"PRIVATE-TOKEN", jobapitest.AdminToken}, hdr...)
			}
			before := jobapitest.RowCounts(t, inst)
			resp, b := jobapitest.Send(t, inst.URL, c.method, c.path, c.body, hdr...)
			if resp.StatusCode >= 500 || resp.StatusCode < 400 || (c.want != 0 && resp.StatusCode != c.want) {
				want := fmt.Sprint(c.want)
				if c.want == 0 {
					want = "a 4xx"
				}
				t.Fatalf("status %d, want %s; body %.300s", resp.StatusCode, want, b)
			}
			jobapitest.WantJSONError(t, resp, b, resp.StatusCode)
			if after := jobapitest.RowCounts(t, inst); !jobapitest.SameCounts(before, after) {
				t.Errorf("rows changed: %v → %v", before, after)
			}
		})
	}

	// Nothing moved: the running job still runs, the other one waits, the runner is as made.
	if d := inst.Job(t, 1, job.ID); d.Status != "running" || d.TraceSize != 0 {
		t.Errorf("running job after bad input: %+v", d)
	}
	if d := inst.Job(t, 1, waitID); d.Status != "pending" {
		t.Errorf("pending job after bad input: %+v", d)
	}
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", rp, nil, &rn)
	if rn.Paused || len(rn.TagList) != 0 || rn.Description != "test runner" {
		t.Errorf("runner after bad input: %+v", rn)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM runners"); n != 1 {
		t.Errorf("%d runners, want 1", n)
	}
}

func manyTags(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%d", i)
	}
	return out
}

// TestHostileStringsStoredVerbatim: SQL- and shell-looking strings are data; they are stored
// and returned byte for byte, and the tables they name are untouched.
func TestHostileStringsStoredVerbatim(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	hostile := []string{
		`Robert'); DROP TABLE runners; --`,
		`' OR '1'='1`,
		`"; TRUNCATE pipelines; --`,
		`$(rm -rf /) ; DELETE FROM builds WHERE '1'='1`,
		`\x00\\'\"%_*?{}[]`,
		"ünïcödé ✓ 🚀",
	}
	var created api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": hostile[0], "tag_list": hostile[1:4], "run_untagged": false}, &created)
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", created.ID), nil, &rn)
	if rn.Description != hostile[0] || !slices.Equal(rn.TagList, hostile[1:4]) {
		t.Errorf("runner stored %q %q", rn.Description, rn.TagList)
	}

	vars := map[string]any{}
	for i, h := range hostile {
		vars[fmt.Sprintf("V%d", i)] = h
	}
	stages := []string{hostile[2], hostile[5]}
	// A ref is a git ref name (git check-ref-format): hostile[1] has spaces, so the ref is a hostile one
	// that git accepts.
	const ref = `'OR'1'='1';DROP_TABLE_builds;--$(id)`
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects/1/pipeline", map[string]any{
		"ref": ref, "stages": stages,
		"jobs": []any{map[string]any{"name": hostile[0], "stage": hostile[2], "script": hostile, "after_script": hostile[3:],
			"tags": hostile[1:4], "variables": vars}},
	}, &p)
	got := inst.Pipeline(t, p)
	if got.Ref != ref || !slices.Equal(got.Stages, stages) || got.Jobs[0].Name != hostile[0] || got.Jobs[0].Stage != hostile[2] {
		t.Errorf("pipeline stored %+v", got)
	}

	job := jobapitest.TakeJob(t, inst.URL, created.Token)
	if job.JobInfo.Name != hostile[0] || job.GitInfo.Ref != ref {
		t.Errorf("job info %+v git %+v", job.JobInfo, job.GitInfo)
	}
	if !slices.Equal(job.Steps[0].Script, hostile) || !slices.Equal(job.Steps[1].Script, hostile[3:]) {
		t.Errorf("steps %+v", job.Steps)
	}
	for i, h := range hostile {
		if v := variable(job, fmt.Sprintf("V%d", i)); v != h {
			t.Errorf("V%d = %q, want %q", i, v, h)
		}
	}
	if v := variable(job, "CI_JOB_NAME"); v != hostile[0] {
		t.Errorf("CI_JOB_NAME %q", v)
	}
	// A log with the same content comes back unchanged.
	trace := []byte(strings.Join(hostile, "\n") + "\n")
	resp, b := jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, 0, trace)
	jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
	_, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", job.ID), nil)
	if !bytes.Equal(b, trace) {
		t.Errorf("trace %q, want %q", b, trace)
	}
	for tbl, want := range map[string]int{"runners": 1, "pipelines": 1, "builds": 1} {
		if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM "+tbl); n != want {
			t.Errorf("%s has %d rows, want %d", tbl, n, want)
		}
	}
}

func variable(j api.Job, key string) string {
	for _, v := range j.Variables {
		if v.Key == key {
			return v.Value
		}
	}
	return "<unset>"
}
