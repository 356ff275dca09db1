package artifacttest_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

const testReportYAML = `
rspec:
  parallel: 2
  script: rspec
  artifacts:
    reports:
      junit: rspec.xml
gotest:
  script: go test ./... | go-junit-report > report.xml
  artifacts:
    reports:
      junit: report.xml
broken:
  script: make test
  artifacts:
    reports:
      junit: report.xml
flaky:
  script: make test
  artifacts:
    reports:
      junit: report.xml
plain:
  script: "true"
`

var junitGzip = runnerclient.ArtifactsOptions{BaseName: "junit.xml.gz", Format: runnerclient.ArtifactFormatGzip, Type: "junit"}

// gzipMembers is what gitlab-runner uploads for artifacts:reports:junit: each matched file
// a gzip member of its own, one after the other.
func gzipMembers(t *testing.T, docs ...string) runnerclient.Content {
	t.Helper()
	var b bytes.Buffer
	for _, d := range docs {
		zw := gzip.NewWriter(&b)
		if _, err := io.WriteString(zw, d); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil }
}

// A pipeline's jobs upload gzipped JUnit reports as gitlab-runner does, and the operator
// reads GitLab's test report: one suite per job name (the two copies of a parallel job in
// one), several files in one report, the latest attempt of a retried job only, a report
// that is not XML as its suite's suite_error while the rest of the report stands. A
// pipeline without reports answers GitLab's empty report. On disk and on S3.
func TestPipelineTestReport(t *testing.T) {
	t.Parallel()
	goJUnit, err := os.ReadFile("../../junit/testdata/go-junit-report.xml")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			inst := start(t, jobapitest.Options{Configure: b.configure(t)})
			r := inst.NewRunner(t)
			p := inst.CreateYAML(t, 1, "", testReportYAML)
			jobs := r.TakeAll(t, 6)
			send := func(name string, c runnerclient.Content, state string) *runnerclient.Job {
				t.Helper()
				job := jobs[name]
				if job == nil {
					t.Fatalf("no job %q among %v", name, jobs)
				}
				wantUpload(t, name, upload(t, r, job, c, junitGzip), http.StatusCreated, runnerclient.UploadSucceeded)
				r.Finish(t, job, state, "script_failure")
				return job
			}
			send("rspec 1/2", gzipMembers(t,
				`<?xml version="1.0"?><testsuite name="a"><testcase name="a1" classname="A" time="1.5"/><testcase name="a2" classname="A" time="0.5"/></testsuite>`,
				`<?xml version="1.0"?><testsuites><testsuite name="b"><testcase name="b1" classname="B" time="0.25"><failure message="expected 1">spec/b_spec.rb:3</failure></testcase></testsuite></testsuites>`),
				runnerclient.StateFailed)
			send("rspec 2/2", gzipMembers(t,
				`<testsuite name="c"><testcase name="c1" classname="C" time="0.25"/><testcase name="c2" classname="C"><skipped message="pending"/></testcase></testsuite>`),
				runnerclient.StateSuccess)
			send("gotest", gzipMembers(t, string(goJUnit)), runnerclient.StateFailed)
			send("broken", gzipMembers(t, `<testsuite><testcase name="cut`), runnerclient.StateFailed)
			flaky := send("flaky", gzipMembers(t, `<testsuite><testcase name="f" time="9"><error message="timeout"/></testcase></testsuite>`), runnerclient.StateFailed)
			r.Finish(t, jobs["plain"], runnerclient.StateSuccess, "")

			var retried api.JobDetail
			inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/1/jobs/%d/retry", flaky.ID), nil, &retried)
			again := r.TakeNamed(t, "flaky")
			wantUpload(t, "flaky again", upload(t, r, again, gzipMembers(t, `<testsuite><testcase name="f" time="2"/></testsuite>`), junitGzip),
				http.StatusCreated, runnerclient.UploadSucceeded)
			r.Finish(t, again, runnerclient.StateSuccess, "")

			var rep api.TestReport
			inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d/test_report", p.ID), nil, &rep)
			if rep.TotalCount != 9 || rep.SuccessCount != 6 || rep.FailedCount != 2 || rep.SkippedCount != 1 || rep.ErrorCount != 0 {
				t.Errorf("totals: %d cases, %d success, %d failed, %d skipped, %d error; want 9, 6, 2, 1, 0",
					rep.TotalCount, rep.SuccessCount, rep.FailedCount, rep.SkippedCount, rep.ErrorCount)
			}
			if want := 1.5 + 0.5 + 0.25 + 0.25 + (0.010 + 0.110 + 1234.5) + 2; !near(rep.TotalTime, want) {
				t.Errorf("total_time %v, want %v", rep.TotalTime, want)
			}
			suites := map[string]api.TestSuite{}
			var names []string
			for _, s := range rep.TestSuites {
				suites[s.Name] = s
				names = append(names, s.Name)
			}
			if _, ok := suites["rspec 1/2"]; ok || len(names) != 4 || suites["rspec"].Name == "" || suites["gotest"].Name == "" ||
				suites["broken"].Name == "" || suites["flaky"].Name == "" {
				t.Fatalf("suites %v, want rspec, gotest, broken, flaky", names)
			}
			rspec := suites["rspec"]
			if rspec.TotalCount != 5 || rspec.FailedCount != 1 || rspec.SkippedCount != 1 || rspec.SuiteError != nil || len(rspec.TestCases) != 5 {
				t.Errorf("suite rspec (both parallel copies): %+v", rspec)
			}
			for _, c := range rspec.TestCases {
				if c.Name == "b1" && (c.Status != "failed" || c.StackTrace == nil || *c.StackTrace != "spec/b_spec.rb:3" ||
					c.SystemOutput == nil || !strings.HasPrefix(*c.SystemOutput, "expected 1") || c.Classname != "B") {
					t.Errorf("failed case b1: %+v", c)
				}
				if c.Name == "a1" && (c.Status != "success" || c.ExecutionTime != 1.5 || c.SystemOutput != nil || c.StackTrace != nil || c.File != nil) {
					t.Errorf("passing case a1: %+v", c)
				}
			}
			if g := suites["gotest"]; g.TotalCount != 3 || g.FailedCount != 1 || g.SuccessCount != 2 {
				t.Errorf("suite gotest: %+v", g)
			}
			broken := suites["broken"]
			if broken.SuiteError == nil || !strings.Contains(*broken.SuiteError, "JUnit XML parsing failed") || broken.TotalCount != 0 || len(broken.TestCases) != 0 {
				t.Errorf("suite broken: %+v, want a suite_error and no cases", broken)
			}
			if f := suites["flaky"]; f.TotalCount != 1 || f.SuccessCount != 1 || f.TotalTime != 2 {
				t.Errorf("suite flaky: %+v, want only the retry's passing case", f)
			}

			var sum api.TestReportSummary
			inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d/test_report_summary", p.ID), nil, &sum)
			if sum.Total.Count != 9 || sum.Total.Failed != 2 || sum.Total.SuiteError == nil || len(sum.TestSuites) != 4 {
				t.Errorf("summary: %+v", sum)
			}
			for _, s := range sum.TestSuites {
				if s.Name == "rspec" && len(s.BuildIDs) != 2 || s.Name == "flaky" && (len(s.BuildIDs) != 1 || s.BuildIDs[0] != again.ID) {
					t.Errorf("summary suite %s from jobs %v", s.Name, s.BuildIDs)
				}
			}

			// No reports: GitLab's empty report, not a 404.
			empty := inst.CreateYAML(t, 1, "", "plain:\n  script: \"true\"\n")
			resp, body := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d/test_report", empty.ID), nil)
			jobapitest.WantStatus(t, resp, body, http.StatusOK)
			if got := strings.TrimSpace(string(body)); got != `{"total_time":0,"total_count":0,"success_count":0,"failed_count":0,"skipped_count":0,"error_count":0,"test_suites":[]}` {
				t.Errorf("report of a pipeline without reports: %s", got)
			}
			resp, body = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d/test_report_summary", empty.ID), nil)
			jobapitest.WantStatus(t, resp, body, http.StatusOK)
			if got := strings.TrimSpace(string(body)); got != `{"total":{"time":0,"count":0,"success":0,"failed":0,"skipped":0,"error":0,"suite_error":null},"test_suites":[]}` {
				t.Errorf("summary of a pipeline without reports: %s", got)
			}
			resp, body = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/2/pipelines/%d/test_report", p.ID), nil)
			jobapitest.WantJSONError(t, resp, body, http.StatusNotFound) // another project's pipeline
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// The object store down while the report is read is an outage (503 with Retry-After), not
// a suite_error that would pass a broken store off as a broken report; once it is back the
// report is whole.
func TestPipelineTestReportStoreDown(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	inst := start(t, jobapitest.Options{Configure: onS3(srv)})
	r := inst.NewRunner(t)
	p := inst.CreateYAML(t, 1, "", "unit:\n  script: make test\n  artifacts:\n    reports:\n      junit: report.xml\n")
	job := r.TakeNamed(t, "unit")
	wantUpload(t, "report", upload(t, r, job, gzipMembers(t, `<testsuite><testcase name="t"/></testsuite>`), junitGzip),
		http.StatusCreated, runnerclient.UploadSucceeded)
	r.Finish(t, job, runnerclient.StateSuccess, "")
	path := fmt.Sprintf("/api/v4/projects/1/pipelines/%d/test_report", p.ID)

	srv.Proxy.Stop()
	resp, body := inst.Do(t, "GET", path, nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusServiceUnavailable)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	srv.Proxy.Start()
	var rep api.TestReport
	inst.MustDo(t, http.StatusOK, "GET", path, nil, &rep)
	if rep.TotalCount != 1 || rep.SuccessCount != 1 || len(rep.TestSuites) != 1 || rep.TestSuites[0].SuiteError != nil {
		t.Errorf("report once the store is back: %+v", rep)
	}
}
