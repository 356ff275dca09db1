package projecttest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// reviewDeployYAML deploys each branch to its review environment, one deploy at a time per
// environment (a group named after it, with a slash).
const reviewDeployYAML = `
deploy:
  script: ./deploy.sh
  environment: review/$CI_COMMIT_REF_SLUG
  resource_group: $CI_ENVIRONMENT_NAME
`

// TestResourceGroupsAPI: the groups a pipeline names appear in GitLab's resource groups API
// (list, one by URL-encoded key, PUT process_mode, upcoming_jobs); a job waiting for its
// group shows waiting_for_resource wherever jobs are shown; bad input is a 4xx with a
// message and changes nothing.
func TestResourceGroupsAPI(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "default_branch": "main"}, &proj)
	base := jobapitest.ProjectPath(proj.ID)
	var ps []api.Pipeline
	for range 3 {
		resp, b := inst.Do(t, "POST", base+"/pipeline", map[string]any{"ref": "Feature/Pay", "ci_config": reviewDeployYAML})
		jobapitest.WantStatus(t, resp, b, http.StatusCreated)
		ps = append(ps, jobapitest.Decode[api.Pipeline](t, b))
	}
	key := "review/feature-pay"
	groupPath := base + "/resource_groups/" + url.PathEscape(key)

	resp, b := inst.Do(t, "GET", base+"/resource_groups", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	var raw []map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 1 {
		t.Fatalf("list: %s (%v); want one group", b, err)
	}
	for _, k := range []string{"id", "key", "process_mode", "created_at", "updated_at"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("group has no %q: %s", k, b)
		}
	}
	if raw[0]["key"] != key || raw[0]["process_mode"] != "unordered" || resp.Header.Get("X-Total") != "1" {
		t.Fatalf("list: %s (X-Total %q); want %s, unordered", b, resp.Header.Get("X-Total"), key)
	}
	var g api.ResourceGroup
	inst.MustDo(t, http.StatusOK, "GET", groupPath, nil, &g)
	if g.Key != key {
		t.Fatalf("GET by key: %+v", g)
	}

	// The first deploy holds the group; the others wait, as every job view shows.
	first := jobapitest.Latest(ps[0])["deploy"]
	waiting := jobapitest.Latest(ps[1])["deploy"]
	if first.Status != "pending" || waiting.Status != "waiting_for_resource" {
		t.Fatalf("deploys: %s and %s; want pending and waiting_for_resource", first.Status, waiting.Status)
	}
	var job api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/jobs/%d", base, waiting.ID), nil, &job)
	if job.Status != "waiting_for_resource" {
		t.Fatalf("GET job: %s", job.Status)
	}
	var listed []api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/jobs?status=waiting_for_resource", nil, &listed)
	if len(listed) != 2 {
		t.Fatalf("admin jobs waiting_for_resource: %d; want 2", len(listed))
	}
	var upcoming []api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", groupPath+"/upcoming_jobs", nil, &upcoming)
	if len(upcoming) != 2 || upcoming[0].ID != waiting.ID || upcoming[1].ID != jobapitest.Latest(ps[2])["deploy"].ID {
		t.Fatalf("upcoming jobs: %+v; want pipeline 2's deploy, then 3's", upcoming)
	}

	// newest_first: when the group is freed, pipeline 3's deploy goes before pipeline 2's.
	inst.MustDo(t, http.StatusOK, "PUT", groupPath, map[string]any{"process_mode": "newest_first"}, &g)
	if g.ProcessMode != "newest_first" {
		t.Fatalf("PUT: %+v", g)
	}
	inst.MustDo(t, http.StatusOK, "GET", groupPath+"/upcoming_jobs", nil, &upcoming)
	if len(upcoming) != 2 || upcoming[0].ID != jobapitest.Latest(ps[2])["deploy"].ID {
		t.Fatalf("upcoming jobs, newest_first: %+v; want pipeline 3's deploy first", upcoming)
	}
	r := inst.NewRunner(t)
	j := r.TakeNamed(t, "deploy")
	if j.ID != first.ID {
		t.Fatalf("took %d; want the holder %d", j.ID, first.ID)
	}
	r.NoJob(t)
	r.Finish(t, j, runnerclient.StateSuccess, "")
	if next := r.TakeNamed(t, "deploy"); next.ID != jobapitest.Latest(ps[2])["deploy"].ID {
		t.Fatalf("after the holder: took %d; want pipeline 3's deploy", next.ID)
	}

	// Bad input: 4xx with a message; nothing changes.
	for _, c := range []struct {
		method, path string
		body         any
		code         int
	}{
		{"PUT", groupPath, map[string]any{"process_mode": "fastest_first"}, http.StatusBadRequest},
		{"PUT", groupPath, map[string]any{}, http.StatusBadRequest},
		{"PUT", groupPath, map[string]any{"process_mode": "oldest_first", "key": "x"}, http.StatusBadRequest},
		{"PUT", base + "/resource_groups/production", map[string]any{"process_mode": "oldest_first"}, http.StatusNotFound},
		{"GET", base + "/resource_groups/production", nil, http.StatusNotFound},
		{"GET", base + "/resource_groups/production/upcoming_jobs", nil, http.StatusNotFound},
		{"GET", "/api/v4/projects/999/resource_groups/" + url.PathEscape(key), nil, http.StatusNotFound},
	} {
		resp, b := inst.Do(t, c.method, c.path, c.body)
		jobapitest.WantStatus(t, resp, b, c.code)
		var msg struct{ Message string }
		if err := json.Unmarshal(b, &msg); err != nil || msg.Message == "" {
			t.Errorf("%s %s: body %s; want {\"message\": ...}", c.method, c.path, b)
		}
	}
	resp, _ = jobapitest.Send(t, inst.URL, "GET", base+"/resource_groups", nil)
	jobapitest.WantStatus(t, resp, nil, http.StatusUnauthorized)
	inst.MustDo(t, http.StatusOK, "GET", groupPath, nil, &g)
	if g.ProcessMode != "newest_first" {
		t.Fatalf("a refused PUT changed the group: %+v", g)
	}
}
