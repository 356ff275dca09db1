package webtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// The pipeline page shows the test report of its jobs' JUnit uploads: the counts, a row per
// suite, the failed cases with their output; the live refresh of the graph leaves it out,
// and a pipeline without reports shows no Tests section.
func TestPipelinePageShowsTests(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	p := inst.CreatePipeline(t, 7, []string{"test"},
		jobapitest.Job{"name": "unit", "stage": "test", "script": []string{"make test"}},
		jobapitest.Job{"name": "lint", "stage": "test", "script": []string{"make lint"}})
	job := runner.TakeNamed(t, "unit")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, `<testsuite><testcase name="adds" classname="calc"/><testcase name="divides" classname="calc">`+
		`<failure message="division by zero">calc_test.go:9: panic</failure></testcase><testcase name="later"><skipped/></testcase></testsuite>`)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := runner.UploadArtifacts(context.Background(), job,
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz.Bytes())), nil },
		runnerclient.ArtifactsOptions{BaseName: "junit.xml.gz", Format: runnerclient.ArtifactFormatGzip, Type: "junit"})
	if err != nil || res.Code != http.StatusCreated {
		t.Fatalf("junit upload: %d %v", res.Code, err)
	}
	runner.Finish(t, job, runnerclient.StateFailed, "script_failure")

	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	page := b.get(fmt.Sprintf("/projects/7/pipelines/%d", p.ID), http.StatusOK)
	for _, want := range []string{`aria-label="Tests"`, "3 tests: 1 passed, 1 failed, 0 errors, 1 skipped", `data-suite="unit"`,
		`data-case="divides"`, "calc › divides (failed)", "division by zero\n\ncalc_test.go:9: panic"} {
		if !strings.Contains(page, want) {
			t.Errorf("pipeline page lacks %q", want)
		}
	}
	if strings.Contains(page, `data-case="adds"`) {
		t.Error("a passing case is listed among the failures")
	}
	fragment := b.get(fmt.Sprintf("/projects/7/pipelines/%d?fragment=1", p.ID), http.StatusOK)
	if !strings.Contains(fragment, `data-name="unit"`) || strings.Contains(fragment, `aria-label="Tests"`) {
		t.Error("the live refresh carries the test report")
	}

	// The job's own page shows its report; its live refresh of the header does not carry it.
	jobPage := b.get(fmt.Sprintf("/projects/7/jobs/%d", job.ID), http.StatusOK)
	for _, want := range []string{`aria-label="Tests"`, "3 tests: 1 passed, 1 failed, 0 errors, 1 skipped", `data-suite="unit"`,
		`data-case="divides"`, "division by zero\n\ncalc_test.go:9: panic"} {
		if !strings.Contains(jobPage, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	if header := b.get(fmt.Sprintf("/projects/7/jobs/%d?fragment=1&part=header", job.ID), http.StatusOK); strings.Contains(header, `aria-label="Tests"`) {
		t.Error("the job page's live refresh carries the test report")
	}
	lint := runner.TakeNamed(t, "lint")
	runner.Finish(t, lint, runnerclient.StateSuccess, "")
	if page := b.get(fmt.Sprintf("/projects/7/jobs/%d", lint.ID), http.StatusOK); strings.Contains(page, `aria-label="Tests"`) {
		t.Error("a job without a report shows a Tests section")
	}

	none := inst.CreatePipeline(t, 7, []string{"test"}, jobapitest.Job{"name": "plain", "stage": "test", "script": []string{"true"}})
	if page := b.get(fmt.Sprintf("/projects/7/pipelines/%d", none.ID), http.StatusOK); strings.Contains(page, `aria-label="Tests"`) {
		t.Error("a pipeline without reports shows a Tests section")
	}
}
