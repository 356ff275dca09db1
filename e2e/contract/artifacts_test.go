package contract_test

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"mime/multipart"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// artifactScenario runs a two-stage pipeline that passes an archive: the runner uploads it
// (multipart, as gitlab-runner does), the next stage's job downloads it with its own token,
// and the operator reads it whole, in a range, one file of it, and deletes it.
func artifactScenario(t *testing.T, c *client, runnerToken, systemID string) {
	t.Helper()
	var p api.Pipeline
	c.decode(&p, http.StatusCreated, "POST", path("/api/v4/projects/%d/pipeline", projectID), jsonBody(t, map[string]any{
		"ref": "main", "ci_config": "stages: [build, deploy]\n" +
			"package:\n  stage: build\n  script: make dist\n  artifacts:\n    paths: [dist/]\n    expire_in: 1 week\n" +
			"ship:\n  stage: deploy\n  script: make ship\n"}), admin)
	request := jsonBody(t, map[string]any{"token": runnerToken, "system_id": systemID, "info": runnerInfo(false)})
	var job api.Job
	c.decode(&job, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if job.ID != p.Jobs[0].ID {
		t.Fatalf("assigned job %d, want %d (package)", job.ID, p.Jobs[0].ID)
	}
	archive, body, contentType := artifactUpload(t)
	uploadPath := path("/api/v4/jobs/%d/artifacts?artifact_format=zip&artifact_type=archive&expire_in=1%%20week", job.ID)
	var stored api.JobArtifact
	c.decode(&stored, http.StatusCreated, "POST", uploadPath, rawBody(contentType, body), jobToken(job.Token))
	if stored.Size != int64(len(archive)) || stored.Filename != "artifacts.zip" || stored.ExpireAt == nil {
		t.Errorf("stored artifact = %+v, want %d bytes named artifacts.zip with an expiry", stored, len(archive))
	}
	c.do(http.StatusForbidden, "POST", uploadPath, rawBody(contentType, body), jobToken("glcbt-wrong"))
	c.do(http.StatusBadRequest, "POST", path("/api/v4/jobs/%d/artifacts?artifact_format=tarzstd", job.ID),
		rawBody(contentType, body), jobToken(job.Token), invalid)
	c.do(http.StatusBadRequest, "POST", path("/api/v4/jobs/%d/artifacts?artifact_type=junit&artifact_format=gzip", job.ID),
		rawBody(contentType, body), jobToken(job.Token)) // a zip is no gzip: damaged
	junitBody, junitType := junitUpload(t)
	c.do(http.StatusCreated, "POST", path("/api/v4/jobs/%d/artifacts?artifact_type=junit&artifact_format=gzip", job.ID),
		rawBody(junitType, junitBody), jobToken(job.Token))
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", job.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(job.Token))

	var report api.TestReport
	c.decode(&report, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/test_report", projectID, p.ID), nil, admin)
	if report.TotalCount != 2 || report.FailedCount != 1 || len(report.TestSuites) != 1 || report.TestSuites[0].Name != "package" {
		t.Errorf("test report = %+v, want suite package with 2 cases, 1 failed", report)
	}
	var summary api.TestReportSummary
	c.decode(&summary, http.StatusOK, "GET", path("/api/v4/projects/%d/pipelines/%d/test_report_summary", projectID, p.ID), nil, admin)
	if summary.Total.Count != 2 || len(summary.TestSuites) != 1 || len(summary.TestSuites[0].BuildIDs) != 1 || summary.TestSuites[0].BuildIDs[0] != job.ID {
		t.Errorf("test report summary = %+v, want 2 cases from job %d", summary, job.ID)
	}
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/99999999/test_report", projectID), nil, admin)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/pipelines/99999999/test_report_summary", projectID), nil, admin)

	var ship api.Job
	c.decode(&ship, http.StatusCreated, "POST", "/api/v4/jobs/request", request)
	if len(ship.Dependencies) != 1 || ship.Dependencies[0].ArtifactsFile == nil ||
		ship.Dependencies[0].ArtifactsFile.Size != int64(len(archive)) || ship.Dependencies[0].Token != ship.Token {
		t.Errorf("ship's dependencies = %+v, want package's archive of %d bytes with ship's own token", ship.Dependencies, len(archive))
	}
	download := path("/api/v4/jobs/%d/artifacts", job.ID)
	if _, b := c.do(http.StatusOK, "GET", download, nil, jobToken(ship.Token)); !bytes.Equal(b, archive) {
		t.Errorf("the dependent job downloaded %d bytes, not the %d uploaded", len(b), len(archive))
	}
	c.do(http.StatusForbidden, "GET", download, nil, jobToken(job.Token)) // finished: its token opens nothing
	c.do(http.StatusNotFound, "GET", "/api/v4/jobs/99999999/artifacts", nil, jobToken(ship.Token))

	base := path("/api/v4/projects/%d/jobs/%d/artifacts", projectID, job.ID)
	if _, b := c.do(http.StatusOK, "GET", base, nil, admin); !bytes.Equal(b, archive) {
		t.Error("the operator's download differs from the upload")
	}
	if _, b := c.do(http.StatusPartialContent, "GET", base, nil, admin, header("Range", "bytes=0-3")); string(b) != "PK\x03\x04" {
		t.Errorf("range 0-3 = %q, want a zip's signature", b)
	}
	c.do(http.StatusRequestedRangeNotSatisfiable, "GET", base, nil, admin, header("Range", "bytes=99999999-"))
	if _, b := c.do(http.StatusOK, "GET", base+"/report.txt", nil, admin); string(b) != "all green\n" {
		t.Errorf("report.txt out of the archive = %q", b)
	}
	c.do(http.StatusNotFound, "GET", base+"/missing.txt", nil, admin)
	c.do(http.StatusNoContent, "DELETE", base, nil, admin)
	c.do(http.StatusNotFound, "GET", base, nil, admin)
	c.do(http.StatusOK, "PUT", path("/api/v4/jobs/%d", ship.ID), jsonBody(t, map[string]any{"state": "success"}), jobToken(ship.Token))
}

// junitUpload is a gzipped JUnit report in the multipart body gitlab-runner sends.
func junitUpload(t *testing.T) (body []byte, contentType string) {
	t.Helper()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`<testsuite name="dist"><testcase name="builds" time="0.5"/>` +
		`<testcase name="signs" time="0.25"><failure message="no key">gpg: no secret key</failure></testcase></testsuite>`))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var mb bytes.Buffer
	mw := multipart.NewWriter(&mb)
	fw, err := mw.CreateFormFile("file", "junit.xml.gz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(gz.Bytes())
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mb.Bytes(), mw.FormDataContentType()
}

// artifactUpload is a small archive and the multipart body gitlab-runner would send it in.
func artifactUpload(t *testing.T) (archive, body []byte, contentType string) {
	t.Helper()
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	w, err := zw.Create("report.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("all green\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var mb bytes.Buffer
	mw := multipart.NewWriter(&mb)
	fw, err := mw.CreateFormFile("file", "artifacts.zip")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(zb.Bytes())
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return zb.Bytes(), mb.Bytes(), mw.FormDataContentType()
}
