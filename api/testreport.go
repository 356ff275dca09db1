package api

// TestReport is GitLab's GET /projects/:id/pipelines/:pipeline_id/test_report.
type TestReport struct {
	TotalTime    float64     `json:"total_time"`
	TotalCount   int         `json:"total_count"`
	SuccessCount int         `json:"success_count"`
	FailedCount  int         `json:"failed_count"`
	SkippedCount int         `json:"skipped_count"`
	ErrorCount   int         `json:"error_count"`
	TestSuites   []TestSuite `json:"test_suites"`
}

// TestSuite is one suite of a test report: the cases of the jobs of one name.
type TestSuite struct {
	Name         string     `json:"name"`
	TotalTime    float64    `json:"total_time"`
	TotalCount   int        `json:"total_count"`
	SuccessCount int        `json:"success_count"`
	FailedCount  int        `json:"failed_count"`
	SkippedCount int        `json:"skipped_count"`
	ErrorCount   int        `json:"error_count"`
	SuiteError   *string    `json:"suite_error"`
	TestCases    []TestCase `json:"test_cases"`
}

// TestCase is one test case; the texts are null when empty, as GitLab sends them.
type TestCase struct {
	Status        string  `json:"status"`
	Name          string  `json:"name"`
	Classname     string  `json:"classname"`
	File          *string `json:"file"`
	ExecutionTime float64 `json:"execution_time"`
	SystemOutput  *string `json:"system_output"`
	StackTrace    *string `json:"stack_trace"`
}

// TestReportSummary is GitLab's GET /projects/:id/pipelines/:pipeline_id/test_report_summary.
type TestReportSummary struct {
	Total      TestTotal          `json:"total"`
	TestSuites []TestSuiteSummary `json:"test_suites"`
}

// TestTotal is a summary's totals; suite_error is the first suite's error, if any.
type TestTotal struct {
	Time       float64 `json:"time"`
	Count      int     `json:"count"`
	Success    int     `json:"success"`
	Failed     int     `json:"failed"`
	Skipped    int     `json:"skipped"`
	Error      int     `json:"error"`
	SuiteError *string `json:"suite_error"`
}

// TestSuiteSummary is a suite without its cases, with the jobs it comes from.
type TestSuiteSummary struct {
	Name         string  `json:"name"`
	TotalTime    float64 `json:"total_time"`
	TotalCount   int     `json:"total_count"`
	SuccessCount int     `json:"success_count"`
	FailedCount  int     `json:"failed_count"`
	SkippedCount int     `json:"skipped_count"`
	ErrorCount   int     `json:"error_count"`
	BuildIDs     []int64 `json:"build_ids"`
	SuiteError   *string `json:"suite_error"`
}
