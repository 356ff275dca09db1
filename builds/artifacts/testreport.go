package artifacts

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/junit"
)

// A pipeline's test report (artifacts:reports:junit), as GitLab builds it: the
// junit artifacts of the pipeline's latest attempts, read from the object store and parsed
// once per replica (junitreports.go keeps the outcome, as GitLab caches), grouped into one
// suite per job name, the copies of a parallel job ("rspec 1/3") under their common name.

// TestReportLimits bound a report's cost: XML bytes per artifact, cases per pipeline, text
// per case.
var TestReportLimits = junit.DefaultLimits

// TestReport is GitLab's pipeline test report: totals and suites.
type TestReport struct {
	TestCounts
	Suites []TestSuite
}

// TestCounts are a suite's or report's totals.
type TestCounts struct {
	TotalTime                                                       float64
	TotalCount, SuccessCount, FailedCount, SkippedCount, ErrorCount int
}

func (c *TestCounts) add(o TestCounts) {
	c.TotalTime += o.TotalTime
	c.TotalCount += o.TotalCount
	c.SuccessCount += o.SuccessCount
	c.FailedCount += o.FailedCount
	c.SkippedCount += o.SkippedCount
	c.ErrorCount += o.ErrorCount
}

func (c *TestCounts) count(tc junit.Case) {
	c.TotalTime += tc.Time
	c.TotalCount++
	switch tc.Status {
	case junit.StatusSuccess:
		c.SuccessCount++
	case junit.StatusFailed:
		c.FailedCount++
	case junit.StatusSkipped:
		c.SkippedCount++
	case junit.StatusError:
		c.ErrorCount++
	}
}

// TestSuite is the cases of the jobs of one name.
type TestSuite struct {
	Name string
	TestCounts
	// BuildIDs are the jobs whose reports make the suite.
	BuildIDs []int64
	// SuiteError says why a job's report could not be read ("" when all were); the cases
	// of that report are left out, those of the suite's other jobs kept.
	SuiteError string
	Cases      []junit.Case
}

// parallelSuffix is the " 2/3" gitlab's parallel: adds to a job's name; GitLab's
// Gitlab::Utils::Job.group_name takes it off for the suite's name.
var parallelSuffix = regexp.MustCompile(`[\s:]+\d+[\s:/\\]+\d+\s*$`)

// testSuiteName is the suite a job's report belongs to.
func testSuiteName(b builds.Build) string {
	if b.Payload.NodeTotal > 0 {
		return parallelSuffix.ReplaceAllString(b.Name, "")
	}
	return b.Name
}

// PipelineTestReport reads a project's pipeline's test report. A report that cannot be read
// (not gzip, not JUnit XML, past the limits, its object gone) sets its suite's SuiteError
// and leaves the rest of the report standing; an object store that fails is an error.
func (s *Service) PipelineTestReport(ctx context.Context, projectID, id int64) (TestReport, error) {
	p, err := s.builds.Pipeline(ctx, projectID, id)
	if err != nil {
		return TestReport{}, err
	}
	return s.TestReportOf(ctx, p)
}

// TestReportOf is PipelineTestReport of a pipeline already read (the web UI's page has it):
// the reports of its latest attempts, as GitLab's.
func (s *Service) TestReportOf(ctx context.Context, p builds.Pipeline) (TestReport, error) {
	latest := make([]builds.Build, 0, len(p.Builds))
	for _, b := range p.Builds {
		if b.RetriedBy == 0 {
			latest = append(latest, b)
		}
	}
	return s.testReport(ctx, latest)
}

// JobTestReport is the test report of one job's own JUnit uploads, retried or not (its
// page in the web UI shows it).
func (s *Service) JobTestReport(ctx context.Context, b builds.Build) (TestReport, error) {
	return s.testReport(ctx, []builds.Build{b})
}

// testReport reads the JUnit artifacts of bs into one report, a suite per job name.
func (s *Service) testReport(ctx context.Context, bs []builds.Build) (TestReport, error) {
	report := TestReport{Suites: []TestSuite{}}
	ids := make([]int64, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	byBuild, err := s.store.ArtifactsOf(ctx, ids)
	if err != nil {
		return TestReport{}, err
	}
	suites := map[string]int{}
	budget := TestReportLimits.MaxCases
	for _, b := range bs {
		for _, a := range byBuild[b.ID] {
			if a.FileType != "junit" {
				continue
			}
			name := testSuiteName(b)
			i, ok := suites[name]
			if !ok {
				i = len(report.Suites)
				suites[name] = i
				report.Suites = append(report.Suites, TestSuite{Name: name, BuildIDs: []int64{}, Cases: []junit.Case{}})
			}
			suite := &report.Suites[i]
			suite.BuildIDs = append(suite.BuildIDs, b.ID)
			cases, err := s.readJUnit(ctx, a, budget)
			var outage *storeReadError
			switch {
			case errors.As(err, &outage):
				return TestReport{}, outage.err
			case errors.Is(err, builds.ErrUnavailable), ctx.Err() != nil:
				return TestReport{}, err
			case err != nil:
				if suite.SuiteError == "" {
					suite.SuiteError = fmt.Sprintf("job %d (%s): %s", b.ID, clipText(b.Name, 64), err.Error())
				}
				continue
			}
			budget -= len(cases)
			for _, c := range cases {
				suite.count(c)
			}
			suite.Cases = append(suite.Cases, cases...)
		}
	}
	for _, suite := range report.Suites {
		report.add(suite.TestCounts)
	}
	return report, nil
}

// errObjectMissing: the object of an artifact's row is not in the store.
var errObjectMissing = errors.New("the report's object is missing from the object store")

// storeReadError is the object store failing mid-read: an outage, not a bad report.
type storeReadError struct{ err error }

func (e *storeReadError) Error() string { return e.err.Error() }

// readJUnit returns the cases of a junit artifact, at most maxCases of them: parsed once on
// this replica (s.reports keeps the outcome) in one of its parse slots. builds.ErrUnavailable when
// no slot came free in time, a *storeReadError when the object store failed.
func (s *Service) readJUnit(ctx context.Context, a builds.Artifact, maxCases int) ([]junit.Case, error) {
	if maxCases <= 0 {
		return nil, &junit.TooManyCasesError{Limit: TestReportLimits.MaxCases}
	}
	got, err := s.reports.read(ctx, a.ObjectKey, func() (*parsedReport, error) {
		cases, err := s.parseJUnit(ctx, a)
		var outage *storeReadError
		if errors.As(err, &outage) || errors.Is(err, errObjectMissing) || ctx.Err() != nil {
			return nil, err // not the report's own outcome: the next view reads it again
		}
		return &parsedReport{key: a.ObjectKey, cases: cases, err: err}, nil
	})
	if err != nil {
		return nil, err
	}
	if got.err != nil {
		return nil, got.err
	}
	if len(got.cases) > maxCases {
		return nil, &junit.TooManyCasesError{Limit: maxCases}
	}
	return got.cases, nil
}

// parseJUnit streams a junit artifact out of the store, through gzip (the runner's format;
// several files are several gzip members), into the parser.
func (s *Service) parseJUnit(ctx context.Context, a builds.Artifact) ([]junit.Case, error) {
	rc, err := s.objects.Open(ctx, a.ObjectKey, 0, -1)
	if errors.Is(err, builds.ErrNotFound) {
		return nil, errObjectMissing
	}
	if err != nil {
		return nil, &storeReadError{err: err}
	}
	defer rc.Close()
	src := &sourceReader{r: rc}
	var r io.Reader = src
	switch a.FileFormat {
	case builds.ArtifactFormatGzip:
		zr, err := gzip.NewReader(src)
		if err != nil {
			if src.err != nil {
				return nil, &storeReadError{err: src.err}
			}
			return nil, fmt.Errorf("the report is not gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	case builds.ArtifactFormatRaw:
	default:
		return nil, fmt.Errorf("a junit report must be gzip or raw, this one is %s", a.FileFormat)
	}
	cases, err := junit.Parse(r, TestReportLimits)
	if err != nil && src.err != nil {
		return nil, &storeReadError{err: src.err}
	}
	return cases, err
}

// sourceReader keeps the object store's read error apart from what the bytes hold.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}
