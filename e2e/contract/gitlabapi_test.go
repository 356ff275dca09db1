package contract_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// gitlabScenario runs a one-job pipeline on its own ref and commit that leaves an archive,
// then calls GitLab's lists and reads that team scripts use: the project's jobs by scope, a
// pipeline's jobs with retried ones, HEAD on a log, artifacts by ref, a commit's statuses,
// the runner lists, the user and the version.
func gitlabScenario(t *testing.T, c *client, runnerToken, systemID string) {
	t.Helper()
	sha := strings.Repeat("5a", 20)
	var p api.Pipeline
	c.decode(&p, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"ref": "release", "sha": sha, "ci_config": "package:\n  script: make dist\n  artifacts:\n    paths: [dist/]\n"}), admin)
	request := jsonBody(t, map[string]any{"token": runnerToken, "system_id": systemID, "info": runnerInfo(false)})
	var job api.Job
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if job.ID != p.Jobs[0].ID {
		t.Fatalf("assigned job %d, want %d (package)", job.ID, p.Jobs[0].ID)
	}
	_, body, contentType := artifactUpload(t)
	c.do(http.StatusCreated, "POST", path("/api/v4/jobs/%d/artifacts?artifact_format=zip&artifact_type=archive", job.ID),
		rawBody(contentType, body), jobToken(job.Token))
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(job.Token))

	var jobs []api.JobDetail
	c.decode(&jobs, http.StatusOK, "GET", path("/api/v4/projects/%d/jobs?scope[]=success&scope[]=failed&per_page=1", projectID), nil, admin)
	if len(jobs) != 1 || jobs[0].ID != job.ID || jobs[0].Pipeline == nil || jobs[0].Pipeline.Sha != sha {
		t.Errorf("the project's newest successful or failed job = %+v, want package (%d)", jobs, job.ID)
	}
	// An implicit project (no row) is shown at project-<id>, as its jobs' CI_PROJECT_URL.
	if len(jobs) == 1 && !strings.HasSuffix(jobs[0].WebURL, path("/jobapi/project-%d/-/jobs/%d", projectID, job.ID)) {
		t.Errorf("web_url of an implicit project's job = %q", jobs[0].WebURL)
	}
	c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/jobs?scope=success,canceled", projectID), nil, admin)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/jobs?scope[]=bogus", projectID), nil, admin, invalid)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/jobs?scope=bogus", projectID), nil, admin)
	c.do(http.StatusNotFound, "GET", "/api/v4/projects/99999999/jobs", nil, admin)
	c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/jobs?scope=success&include_retried=true", projectID, p.ID), nil, admin)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/pipelines/%d/jobs?include_retried=maybe", projectID, p.ID), nil, admin, invalid)

	c.do(http.StatusOK, "HEAD", path("/api/v4/projects/%d/jobs/%d/trace", projectID, job.ID), nil, admin)
	c.do(http.StatusNotFound, "HEAD", path("/api/v4/projects/%d/jobs/99999999/trace", projectID), nil, admin)

	if _, b := c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/artifacts/release/download?job=package", projectID), nil, admin); len(b) == 0 {
		t.Error("the archive by ref is empty")
	}
	if _, b := c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/jobs/artifacts/release/raw/report.txt?job=package", projectID), nil, admin); string(b) != "all green\n" {
		t.Errorf("report.txt by ref = %q", b)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/jobs/artifacts/release/download?job=ship", projectID), nil, admin)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/jobs/artifacts/release/raw/missing.txt?job=package", projectID), nil, admin)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/jobs/artifacts/release/download", projectID), nil, admin, invalid)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/jobs/artifacts/release/raw/report.txt", projectID), nil, admin, invalid)

	var statuses []api.CommitStatus
	c.decode(&statuses, http.StatusOK, "GET", path("/api/v4/projects/%d/repository/commits/%s/statuses?ref=release&all=true", projectID, sha), nil, admin)
	if len(statuses) != 1 || statuses[0].ID != job.ID || statuses[0].Status != "success" {
		t.Errorf("the commit's statuses = %+v, want package's success", statuses)
	}
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/repository/commits/main/statuses", projectID), nil, admin)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/repository/commits/%s/statuses?all=maybe", projectID, sha), nil, admin, invalid)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/99999999/repository/commits/%s/statuses", sha), nil, admin)

	var runners []api.ListedRunner
	c.decode(&runners, http.StatusOK, "GET", "/api/v4/runners/all?status=online&type=instance_type&paused=false", nil, admin)
	if len(runners) == 0 {
		t.Error("no online runner, though one just ran a job")
	}
	c.do(http.StatusBadRequest, "GET", "/api/v4/runners/all?status=busy", nil, admin, invalid)
	c.do(http.StatusOK, "GET", "/api/v4/runners?status=online&tag_list=a", nil, admin)
	c.do(http.StatusBadRequest, "GET", "/api/v4/runners?paused=perhaps", nil, admin, invalid)
	c.do(http.StatusOK, "GET", path("/api/v4/projects/%d/runners?tag_list=a,b&scope=active", projectID), nil, admin)
	c.do(http.StatusBadRequest, "GET", path("/api/v4/projects/%d/runners?type=shared", projectID), nil, admin, invalid)
	c.do(http.StatusNotFound, "GET", "/api/v4/projects/99999999/runners", nil, admin)

	var user api.User
	c.decode(&user, http.StatusOK, "GET", "/api/v4/user", nil, admin)
	if !user.IsAdmin {
		t.Errorf("user = %+v, want the admin", user)
	}
	c.do(http.StatusUnauthorized, "GET", "/api/v4/user", nil, invalid)
	c.do(http.StatusOK, "GET", "/api/v4/version", nil, admin)
	c.do(http.StatusUnauthorized, "GET", "/api/v4/version", nil, invalid)
}
