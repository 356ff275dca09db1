package operatortest_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

func TestOperatorAuth(t *testing.T) {
	t.Parallel()
	// 51 wrong tokens from one address: past the per-address budget every answer would be
	// 429 (TestAdminTokenGuessingIsThrottled checks that); this test checks each route's 401.
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.RateLimitAdminTokenFailures = 0 }})
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "j", "stage": "test", "script": "x"})
	jobID := p.Jobs[0].ID
	before := jobapitest.RowCounts(t, inst)
	calls := []struct{ method, path, body string }{
		{"POST", "/api/v4/user/runners", `{"description": "x"}`},
		{"GET", "/api/v4/runners", ""},
		{"GET", "/api/v4/runners/1", ""},
		{"PUT", "/api/v4/runners/1", `{"paused": true}`},
		{"POST", "/api/v4/projects/1/pipeline", `{"jobs": [{"name": "a", "script": "x"}]}`},
		{"GET", jobapitest.PipelinePath(p.ProjectID, p.ID), ""},
		{"GET", jobapitest.PipelinePath(p.ProjectID, p.ID) + "/jobs", ""},
		{"POST", jobapitest.PipelinePath(p.ProjectID, p.ID) + "/cancel", ""},
		{"GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d", jobID), ""},
		{"GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", jobID), ""},
		{"GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/events", jobID), ""},
		{"POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/cancel", jobID), ""},
		{"POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/retry", jobID), ""},
		{"GET", "/api/v4/admin/jobs?status=pending", ""},
		{"GET", "/api/v4/features", ""},
		{"POST", "/api/v4/features/allow_runner_job_acknowledgement", `{"value": true}`},
		{"DELETE", "/api/v4/features/allow_runner_job_acknowledgement", ""},
	}
	for _, c := range calls {
		var body any
		if c.body != "" {
			body = c.body
		}
		resp, b := jobapitest.Send(t, inst.URL, c.method, c.path, body)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without PRIVATE-TOKEN: %d %s, want 401", c.method, c.path, resp.StatusCode, b)
		} else {
			jobapitest.WantJSONError(t, resp, b, http.StatusUnauthorized)
		}
		for _, tok := range []string{"wrong", jobapitest.AdminToken + "x", strings.ToUpper(jobapitest.AdminToken)} {
			resp, b = jobapitest.Send(t, inst.URL, c.method, c.path, body, "PRIVATE-TOKEN", tok)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with a wrong PRIVATE-TOKEN: %d %s, want 401", c.method, c.path, resp.StatusCode, b)
			} else {
				jobapitest.WantJSONError(t, resp, b, http.StatusUnauthorized)
			}
		}
	}
	if after := jobapitest.RowCounts(t, inst); !jobapitest.SameCounts(before, after) {
		t.Errorf("unauthenticated calls wrote rows: %v → %v", before, after)
	}
	if d := inst.Job(t, 1, jobID); d.Status != "pending" {
		t.Errorf("job %s after unauthenticated cancel", d.Status)
	}
}

func TestRunnersAPI(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})

	// JSON body.
	var created api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": "json runner", "tag_list": []string{"docker", "linux"}, "run_untagged": false}, &created)
	if created.ID == 0 || !strings.HasPrefix(created.Token, "glrt-") || len(created.Token) < 14 || created.TokenExpiresAt != nil {
		t.Errorf("created runner %+v: want an id, a long glrt- token and a null expiry", created)
	}

	// Form body, as `curl -d tag_list=a,b` sends it.
	resp, b := inst.Do(t, "POST", "/api/v4/user/runners", "description=form+runner&tag_list=a,b&run_untagged=false&paused=true",
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	form := jobapitest.Decode[api.RunnerCreated](t, b)
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", form.ID), nil, &rn)
	if rn.Description != "form runner" || !slices.Equal(rn.TagList, []string{"a", "b"}) || rn.RunUntagged || !rn.Paused {
		t.Errorf("form-created runner %+v", rn)
	}
	// tag_list[] repeated, GitLab's array form.
	resp, b = inst.Do(t, "POST", "/api/v4/user/runners", "tag_list[]=x&tag_list[]=y",
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	arr := jobapitest.Decode[api.RunnerCreated](t, b)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", arr.ID), nil, &rn)
	if !slices.Equal(rn.TagList, []string{"x", "y"}) {
		t.Errorf("tag_list[] runner tags %v", rn.TagList)
	}
	// tag_list as a comma-separated JSON string.
	var str api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners", map[string]any{"tag_list": "p, q"}, &str)

	// Show.
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", created.ID), nil, &rn)
	if rn.ID != created.ID || rn.Description != "json runner" || !slices.Equal(rn.TagList, []string{"docker", "linux"}) ||
		rn.RunUntagged || rn.Paused || rn.Managers == nil {
		t.Errorf("runner %+v", rn)
	}
	resp, b = inst.Do(t, "GET", "/api/v4/runners/999999", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)

	// Update: JSON and form; unset fields stay.
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/runners/%d", created.ID), map[string]any{"tag_list": []string{"gpu"}, "run_untagged": true})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	rn = jobapitest.Decode[api.Runner](t, b)
	if !slices.Equal(rn.TagList, []string{"gpu"}) || !rn.RunUntagged || rn.Description != "json runner" || rn.Paused {
		t.Errorf("after JSON update: %+v", rn)
	}
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/runners/%d", created.ID), "paused=true",
		"Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if rn = jobapitest.Decode[api.Runner](t, b); !rn.Paused || !slices.Equal(rn.TagList, []string{"gpu"}) {
		t.Errorf("after form update: %+v", rn)
	}
	resp, b = inst.Do(t, "PUT", "/api/v4/runners/999999", map[string]any{"paused": true})
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)

	// List with GitLab's pagination headers: 4 runners, 3 per page.
	resp, b = inst.Do(t, "GET", "/api/v4/runners?per_page=3", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	page1 := jobapitest.Decode[[]api.Runner](t, b)
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "1", "X-Per-Page": "3", "X-Total": "4", "X-Next-Page": "2"})
	resp, b = inst.Do(t, "GET", "/api/v4/runners?per_page=3&page=2", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	page2 := jobapitest.Decode[[]api.Runner](t, b)
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "2", "X-Per-Page": "3", "X-Total": "4", "X-Next-Page": ""})
	if len(page1) != 3 || len(page2) != 1 {
		t.Fatalf("pages of %d and %d runners, want 3 and 1", len(page1), len(page2))
	}
	var ids []int64
	for _, r := range append(page1, page2...) {
		ids = append(ids, r.ID)
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != 4 {
		t.Errorf("runner ids over the pages %v: want 4 distinct, in order", ids)
	}
	resp, b = inst.Do(t, "GET", "/api/v4/runners?page=9", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if string(b) != "[]\n" && string(b) != "[]" {
		t.Errorf("page past the end: %s, want []", b)
	}
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Total": "4", "X-Next-Page": ""})
	// Defaults: page 1, 20 per page; per_page is capped at 100 as in GitLab.
	resp, _ = inst.Do(t, "GET", "/api/v4/runners", nil)
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "1", "X-Per-Page": "20", "X-Total": "4"})
	resp, _ = inst.Do(t, "GET", "/api/v4/runners?per_page=500", nil)
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Per-Page": "100", "X-Total": "4", "X-Next-Page": ""})
}

func TestAdminJobsList(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	p := inst.CreatePipeline(t, 3, []string{"a", "b"},
		jobapitest.Job{"name": "j1", "stage": "a", "script": "x"},
		jobapitest.Job{"name": "j2", "stage": "a", "script": "x"},
		jobapitest.Job{"name": "j3", "stage": "a", "script": "x"},
		jobapitest.Job{"name": "j4", "stage": "a", "script": "x"},
		jobapitest.Job{"name": "j5", "stage": "a", "script": "x"},
		jobapitest.Job{"name": "later", "stage": "b", "script": "x"})
	inst.CreatePipeline(t, 4, []string{"test"}, jobapitest.Job{"name": "other-project", "stage": "test", "script": "x"})
	running := jobapitest.TakeJob(t, inst.URL, token)

	// 5 pending across two projects, 2 per page.
	var all []int64
	for page := 1; page <= 3; page++ {
		resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/admin/jobs?status=pending&per_page=2&page=%d", page), nil)
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		next := ""
		if page < 3 {
			next = fmt.Sprint(page + 1)
		}
		jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": fmt.Sprint(page), "X-Per-Page": "2", "X-Total": "5", "X-Next-Page": next})
		for _, j := range jobapitest.Decode[[]api.JobDetail](t, b) {
			if j.Status != "pending" {
				t.Errorf("status=pending listed %+v", j)
			}
			all = append(all, j.ID)
		}
	}
	if len(all) != 5 || !slices.IsSorted(all) {
		t.Errorf("pending ids %v, want 5 in order", all)
	}
	var list []api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/jobs?status=running", nil, &list)
	if len(list) != 1 || list[0].ID != running.ID || list[0].Runner == nil {
		t.Errorf("running jobs %+v, want %d", list, running.ID)
	}
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/jobs?status=created", nil, &list)
	if len(list) != 1 || list[0].ID != jobapitest.JobByName(t, p, "later").ID {
		t.Errorf("created jobs %+v", list)
	}
	// GitLab's scope= spelling works too.
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/jobs?scope=waiting_for_runner_ack", nil, &list)
	if len(list) != 0 {
		t.Errorf("waiting jobs %+v, want none in the legacy flow", list)
	}
	for _, q := range []string{"status=bogus", "status=", "", "status=PENDING", "status=pending'--",
		"status=pending&per_page=0", "status=pending&page=-1", "status=pending&page=x"} {
		resp, b := inst.Do(t, "GET", "/api/v4/admin/jobs?"+q, nil)
		jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	}
}

// A runner's managers are paged like every list (SPEC §7): GET /runners/:id used to return
// all of them, 829 KB for a runner whose token had been used from many machines.
func TestRunnerManagersPaged(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	id, token := inst.CreateRunner(t)
	for i := 0; i < 5; i++ {
		resp, b := jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners/verify",
			map[string]any{"token": token, "system_id": fmt.Sprintf("s_page%d", i), "info": jobapitest.RunnerInfo()})
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
	}
	resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/runners/%d?per_page=2&page=2", id), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	rn := jobapitest.Decode[api.Runner](t, b)
	if len(rn.Managers) != 2 || rn.Managers[0].SystemID != "s_page2" || rn.Managers[1].SystemID != "s_page3" {
		t.Errorf("page 2 of 2: managers %+v, want s_page2 and s_page3", rn.Managers)
	}
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "2", "X-Per-Page": "2", "X-Total": "5", "X-Next-Page": "3"})
	resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/runners/%d", id), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if rn = jobapitest.Decode[api.Runner](t, b); len(rn.Managers) != 5 {
		t.Errorf("default page: %d managers, want all 5", len(rn.Managers))
	}
	jobapitest.WantHeaders(t, resp, map[string]string{"X-Page": "1", "X-Per-Page": "20", "X-Total": "5", "X-Next-Page": ""})
}
