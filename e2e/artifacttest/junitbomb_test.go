package artifacttest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// junitBomb is a gzipped report of n elements nested in a test case: 10 million of them
// are 30 MB of XML (just under the byte limit) in 30 KB of gzip.
func junitBomb(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(zw, `<testsuites><testsuite name="bomb"><testcase name="deep">`)
	chunk := []byte(strings.Repeat("<a>", 10_000))
	for range n / 10_000 {
		if _, err := zw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// procStatus reads a value in kB of /proc/<pid>/status (VmRSS, VmHWM), in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// A job uploads a JUnit report that is a 30 KB gzip of ten million nested elements. A real
// `jobapi serve` answers its pipeline's test report and web page at once, with the report's
// suite saying it is too deep, and its memory stays bounded: the parser refuses the report at
// the depth limit instead of keeping a record per open element (1.2 GB and 34 s before).
// The outcome is kept: once read, the report is answered from the replica's cache, even with
// its object gone, while a replica that never read it finds the object missing.
func TestJUnitBombBoundedMemory(t *testing.T) {
	t.Parallel()
	bin := jobapitest.BuildJobapi(t)
	inst := start(t, jobapitest.Options{})
	child, logs := jobapitest.StartServe(t, bin, inst.Config, nil)
	base := jobapitest.ServeURL(t, logs.String())
	r := inst.NewRunner(t)
	p := inst.CreateYAML(t, 1, "", "unit:\n  script: make test\n  artifacts:\n    reports:\n      junit: report.xml\n")
	job := r.TakeNamed(t, "unit")
	bomb := junitBomb(t, 10_000_000)
	t.Logf("the report: %d bytes of gzip, 10,000,000 nested elements", len(bomb))
	wantUpload(t, "the bomb", upload(t, r, job, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(bomb)), nil }, junitGzip),
		http.StatusCreated, runnerclient.UploadSucceeded)
	r.Finish(t, job, runnerclient.StateFailed, "script_failure")

	// The web UI, signed in as the operator.
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar, Timeout: 3 * time.Minute}
	form := url.Values{"token": {jobapitest.AdminToken}, "next": {"/pipelines"}}
	req, _ := http.NewRequest("POST", base+"/sign_in", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if resp, err := web.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	pid := child.Process.Pid
	reportPath := fmt.Sprintf("/api/v4/projects/1/pipelines/%d/test_report", p.ID)
	jobapitest.Send(t, base, "GET", "/-/readiness", nil)
	before := procStatus(t, pid, "VmRSS")

	readReport := func(what, base string) api.TestSuite {
		t.Helper()
		start := time.Now()
		resp, body := jobapitest.Send(t, base, "GET", reportPath, nil, "PRIVATE-TOKEN", jobapitest.AdminToken)
		took := time.Since(start)
		jobapitest.WantStatus(t, resp, body, http.StatusOK)
		var rep api.TestReport
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.TestSuites) != 1 || rep.TestSuites[0].SuiteError == nil {
			t.Fatalf("%s: %s, want one suite with a suite_error", what, body)
		}
		t.Logf("%s in %v: %s", what, took.Round(time.Millisecond), *rep.TestSuites[0].SuiteError)
		if took > 10*time.Second {
			t.Errorf("%s took %v", what, took)
		}
		return rep.TestSuites[0]
	}
	suite := readReport("test_report", base)
	if !strings.Contains(*suite.SuiteError, "the report is too deep: its elements nest more than 256 levels deep") || suite.TotalCount != 0 {
		t.Errorf("suite of the bomb: %+v, want a suite_error saying the report is too deep", suite)
	}

	start := time.Now()
	resp, err := web.Get(fmt.Sprintf("%s/projects/1/pipelines/%d", base, p.ID))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "the report is too deep") {
		t.Errorf("pipeline page: %d, without the suite's error:\n%.2000s", resp.StatusCode, page)
	}
	t.Logf("pipeline page in %v", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the pipeline page took %v", took)
	}

	peak := procStatus(t, pid, "VmHWM")
	t.Logf("jobapi serve: RSS %d MB before, peak %d MB after (growth %d MB)", before>>20, peak>>20, (peak-before)>>20)
	if peak-before > 100<<20 {
		t.Errorf("memory grew by %d MB reading the report, want < 100 MB", (peak-before)>>20)
	}

	// Kept: with its object gone, the replica that read it answers the same; another that
	// never read it finds the object missing.
	var key string
	if err := inst.Pool.QueryRow(context.Background(), "SELECT object_key FROM job_artifacts WHERE file_type = 'junit'").Scan(&key); err != nil {
		t.Fatal(err)
	}
	if err := inst.Objects.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if again := readReport("test_report again, its object gone", base); *again.SuiteError != *suite.SuiteError {
		t.Errorf("the report read again: %q, want the kept %q", *again.SuiteError, *suite.SuiteError)
	}
	if other := readReport("test_report on a replica that never read it", inst.URL); !strings.Contains(*other.SuiteError, "missing from the object store") {
		t.Errorf("a replica without the report kept: %q", *other.SuiteError)
	}
}
