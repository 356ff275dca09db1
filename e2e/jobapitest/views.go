package jobapitest

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// ProjectPath is the operator API path of a project.
func ProjectPath(id int64) string { return "/api/v4/projects/" + strconv.FormatInt(id, 10) }

// Decode unmarshals b into a new T, failing the test on error.
func Decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T from %.300s: %v", v, b, err)
	}
	return v
}

// JobStatuses maps job name to status for the latest attempt of each job.
func JobStatuses(p api.Pipeline) map[string]string {
	out := map[string]string{}
	for name, j := range Latest(p) {
		out[name] = j.Status
	}
	return out
}

// JobByName is the latest attempt of a pipeline's named job, failing the test if it has none.
func JobByName(t testing.TB, p api.Pipeline, name string) api.PipelineJob {
	t.Helper()
	j, ok := Latest(p)[name]
	if !ok {
		t.Fatalf("pipeline %d has no job %q: %+v", p.ID, name, p.Jobs)
	}
	return j
}

// WantStatuses checks a pipeline's status and those of the named jobs' latest attempts.
func WantStatuses(t testing.TB, p api.Pipeline, pipeline string, jobs map[string]string) {
	t.Helper()
	got := JobStatuses(p)
	for name, want := range jobs {
		if got[name] != want {
			t.Errorf("job %s is %s, want %s (all: %v)", name, got[name], want, got)
		}
	}
	if p.Status != pipeline {
		t.Errorf("pipeline %s, want %s (jobs %v)", p.Status, pipeline, got)
	}
}

// WantHeaders checks response headers; a want of "" requires the header present and empty.
func WantHeaders(t testing.TB, resp *http.Response, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := resp.Header[http.CanonicalHeaderKey(k)]; !ok || resp.Header.Get(k) != v {
			t.Errorf("%s %s: header %s = %q (present %v), want %q", resp.Request.Method, resp.Request.URL,
				k, got, ok, v)
		}
	}
}

// countedTables are counted to prove that a rejected request wrote nothing.
var countedTables = []string{"runners", "runner_managers", "pipelines", "pipeline_iids", "builds", "build_events", "build_trace_chunks"}

// RowCounts returns the number of rows of each table a runner's or an operator's request
// writes, in the instance's database.
func RowCounts(t testing.TB, inst *Instance) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tbl := range countedTables {
		out[tbl] = QueryInt(t, inst.Pool, "SELECT count(*) FROM "+tbl)
	}
	return out
}

// SameCounts reports whether two RowCounts are equal.
func SameCounts(a, b map[string]int) bool {
	for _, tbl := range countedTables {
		if a[tbl] != b[tbl] {
			return false
		}
	}
	return true
}

// Zip is a zip archive of files, as gitlab-runner uploads a job's artifacts:paths.
func Zip(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		f, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
