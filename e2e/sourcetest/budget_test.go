package sourcetest_test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

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

// A .gitlab-ci.yml includes thirty 1 MiB files of a real repository, each of 262,000 values.
// The configuration and its includes share one budget spent as each file is read: a real
// `jobapi serve` refuses the pipeline with a 400 naming the limit at the second file, without
// reading the others, and its memory stays bounded (on main it merged all thirty, ~8 M
// values, before the total was checked).
func TestIncludeFanOutRefusedEarly(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	files := map[string]string{}
	var ci strings.Builder
	ci.WriteString("include:\n")
	for i := range 30 {
		head := fmt.Sprintf(".bulk-%d: ", i)
		files[fmt.Sprintf("ci/bulk-%d.yml", i)] = head + "[" + strings.Repeat("abc,", (1<<20-len(head)-4)/4) + "x]\n"
		fmt.Fprintf(&ci, "  - local: ci/bulk-%d.yml\n", i)
	}
	ci.WriteString("job: {script: x}\n")
	sha := m.Commit(files)

	bin := jobapitest.BuildJobapi(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	child, logs := jobapitest.StartServe(t, bin, inst.Config, nil)
	base := jobapitest.ServeURL(t, logs.String())
	resp, body := jobapitest.Send(t, base, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare},
		"PRIVATE-TOKEN", jobapitest.AdminToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create project: %d %s", resp.StatusCode, body)
	}
	pid := child.Process.Pid
	jobapitest.Send(t, base, "GET", "/-/readiness", nil)
	before := procStatus(t, pid, "VmRSS")
	start := time.Now()
	resp, body = jobapitest.Send(t, base, "POST", "/api/v4/projects/1/pipeline?ref=main&sha="+sha, ci.String(),
		"PRIVATE-TOKEN", jobapitest.AdminToken, "Content-Type", "application/yaml")
	took := time.Since(start)
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("refused in %v: %d %s", took.Round(time.Millisecond), resp.StatusCode, body)
	t.Logf("jobapi serve: RSS %d MB before, peak %d MB after (growth %d MB)", before>>20, peak>>20, (peak-before)>>20)
	if resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(body), "include:local `ci/bulk-1.yml`: the configuration expands to more than 500000 values") {
		t.Errorf("30 × 1 MiB includes: %d %s, want a 400 naming the values limit at ci/bulk-1.yml", resp.StatusCode, body)
	}
	// main: 1,612 MB and 33 s (without -race); here about 105 MB (the YAML library's tree
	// of one 1 MiB file while it is read) and 2 s.
	if limit := int64(250*memoryFactor) << 20; peak-before > limit {
		t.Errorf("memory grew by %d MB, want < %d MB", (peak-before)>>20, limit>>20)
	}
}
