// Operator API, a pipeline's test reports: a member's personal access token, or an
// administrator's (or the admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's
// action (h.can in routes.go) decides by the caller's role (builds/access).

package handlers

import (
	"net/http"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/artifacts"
)

// testReport reads the pipeline of the path's report (404 for another project's pipeline).
func (h *Handler) testReport(r *http.Request) (artifacts.TestReport, error) {
	pid, err := projectID(r)
	if err != nil {
		return artifacts.TestReport{}, err
	}
	id, err := pathID(r, "pipeline_id")
	if err != nil {
		return artifacts.TestReport{}, err
	}
	return h.arts.PipelineTestReport(r.Context(), pid, id)
}

// getTestReport is GitLab's GET /projects/:id/pipelines/:pipeline_id/test_report: the
// junit reports of the pipeline's latest jobs, one suite per job name. A report that
// cannot be read is the suite's suite_error, never the request's failure.
func (h *Handler) getTestReport(w http.ResponseWriter, r *http.Request) error {
	rep, err := h.testReport(r)
	if err != nil {
		return err
	}
	out := api.TestReport{TotalTime: rep.TotalTime, TotalCount: rep.TotalCount, SuccessCount: rep.SuccessCount,
		FailedCount: rep.FailedCount, SkippedCount: rep.SkippedCount, ErrorCount: rep.ErrorCount,
		TestSuites: make([]api.TestSuite, len(rep.Suites))}
	for i, s := range rep.Suites {
		cases := make([]api.TestCase, len(s.Cases))
		for j, c := range s.Cases {
			cases[j] = api.TestCase{Status: c.Status, Name: c.Name, Classname: c.Classname, File: nullable(c.File),
				ExecutionTime: c.Time, SystemOutput: nullable(c.SystemOutput), StackTrace: nullable(c.StackTrace)}
		}
		out.TestSuites[i] = api.TestSuite{Name: s.Name, TotalTime: s.TotalTime, TotalCount: s.TotalCount,
			SuccessCount: s.SuccessCount, FailedCount: s.FailedCount, SkippedCount: s.SkippedCount,
			ErrorCount: s.ErrorCount, SuiteError: nullable(s.SuiteError), TestCases: cases}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getTestReportSummary is GitLab's GET /projects/:id/pipelines/:pipeline_id/test_report_summary:
// the counts without the cases.
func (h *Handler) getTestReportSummary(w http.ResponseWriter, r *http.Request) error {
	rep, err := h.testReport(r)
	if err != nil {
		return err
	}
	out := api.TestReportSummary{Total: api.TestTotal{Time: rep.TotalTime, Count: rep.TotalCount,
		Success: rep.SuccessCount, Failed: rep.FailedCount, Skipped: rep.SkippedCount, Error: rep.ErrorCount},
		TestSuites: make([]api.TestSuiteSummary, len(rep.Suites))}
	for i, s := range rep.Suites {
		out.TestSuites[i] = api.TestSuiteSummary{Name: s.Name, TotalTime: s.TotalTime, TotalCount: s.TotalCount,
			SuccessCount: s.SuccessCount, FailedCount: s.FailedCount, SkippedCount: s.SkippedCount,
			ErrorCount: s.ErrorCount, BuildIDs: s.BuildIDs, SuiteError: nullable(s.SuiteError)}
		if out.Total.SuiteError == nil {
			out.Total.SuiteError = nullable(s.SuiteError)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// nullable is s, or null when it is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
