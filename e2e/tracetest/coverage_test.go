package tracetest_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

const coverageYAML = `
stages: [test]
unit:
  stage: test
  script: go test -cover ./...
  coverage: '/coverage: (\d+\.\d+)% of statements/'
integration:
  stage: test
  script: ./integration
  coverage: '/Total coverage: \d+\.\d+%/'
lint:
  stage: test
  script: make lint
  coverage: '/coverage: (\d+)%/'
docs:
  stage: test
  script: make docs
`

// TestCoverage: a job's coverage regex is applied to its log when the log is archived after
// the runner finished the job (GitLab's rule: the last matching line), shown on the job, and the pipeline shows the
// average of its jobs that have one; a job whose log has no match, and a job without a
// regex, show null.
func TestCoverage(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "cov", "default_branch": "main"}, &proj)
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline?ref=main", coverageYAML, "Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p := jobapitest.Decode[api.Pipeline](t, b)

	logs := map[string]string{
		// The last matching line wins: 87.5, not the 12.0 of the first package.
		"unit": "ok  a  coverage: 12.0% of statements\n\x1b[0;32mok  b  coverage: 87.5% of statements\x1b[0m\nPASS\n",
		// A regex without a group: the first number of the match.
		"integration": "running\r\nTotal coverage: 62.50%\r\ndone\r\n",
		"lint":        "no coverage printed here\n",
		"docs":        "coverage: 99% of nothing\n",
	}
	r := inst.NewRunner(t)
	jobs := r.TakeAll(t, 4)
	for name, job := range jobs {
		if res := r.Patch(t, job, 0, logs[name]); res.Code != http.StatusAccepted {
			t.Fatalf("PATCH trace of %s: %d", name, res.Code)
		}
		r.Finish(t, job, runnerclient.StateSuccess, "")
	}

	want := map[string]*float64{"unit": ptr(87.5), "integration": ptr(62.5), "lint": nil, "docs": nil}
	for name, job := range jobs {
		// The coverage is found while the log is archived, after the finish (as GitLab's
		// workers do): it is there once the job lists its trace.
		got := waitTraceArchived(t, inst, proj.ID, job.ID)
		switch w := want[name]; {
		case w == nil && got.Coverage != nil:
			t.Errorf("%s coverage %v, want null", name, *got.Coverage)
		case w != nil && (got.Coverage == nil || *got.Coverage != *w):
			t.Errorf("%s coverage %v, want %v", name, got.Coverage, *w)
		}
	}
	var got api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/pipelines/%d", jobapitest.ProjectPath(proj.ID), p.ID), nil, &got)
	if got.Coverage == nil || *got.Coverage != "75.00" {
		t.Errorf("pipeline coverage %v, want \"75.00\" (the average of 87.5 and 62.5)", got.Coverage)
	}
}

func ptr[T any](v T) *T { return &v }

// waitTraceArchived polls a finished job until its log is archived (its artifacts list the
// trace) and returns it.
func waitTraceArchived(t *testing.T, inst *jobapitest.Instance, projectID, jobID int64) api.JobDetail {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The replica archives at once after the final update; the pass (off in tests unless
		// called) retries one that failed, after its backoff.
		if _, err := inst.Traces.PassOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		var got api.JobDetail
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/jobs/%d", jobapitest.ProjectPath(projectID), jobID), nil, &got)
		for _, a := range got.Artifacts {
			if a.FileType == "trace" {
				// The view reads the build before its artifacts: read it once more, now
				// that the archive (and the coverage with it) is committed.
				inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/jobs/%d", jobapitest.ProjectPath(projectID), jobID), nil, &got)
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: log not archived after 30 s (artifacts %+v)", jobID, got.Artifacts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
