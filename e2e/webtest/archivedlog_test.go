package webtest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestArchivedLogPage: once a job's log is archived into the object store and its live
// chunks are gone, the job page still shows its tail with the right line numbers, an
// earlier window pages from the start, and the raw log streams it whole: every read of
// the log view goes to the archive.
func TestArchivedLogPage(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "archived", "stage": "test", "script": []string{"true"}})
	job := runner.TakeNamed(t, "archived")
	var log strings.Builder
	lines := 0
	for log.Len() < 700<<10 { // more than two of the page's 256 KiB windows
		lines++
		fmt.Fprintf(&log, "\x1b[32mline %06d\x1b[0m of a log that outlives its live chunks\n", lines)
	}
	for off := 0; off < log.Len(); {
		n := min(log.Len()-off, 256<<10)
		if res := runner.Patch(t, job, off, log.String()[off:off+n]); res.Code != http.StatusAccepted {
			t.Fatalf("trace patch at %d: %d", off, res.Code)
		}
		off += n
	}
	runner.Finish(t, job, runnerclient.StateSuccess, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		var chunks int
		var listed bool
		if err := inst.Pool.QueryRow(context.Background(), `SELECT
            (SELECT count(*) FROM build_trace_chunks WHERE build_id = $1),
            EXISTS (SELECT 1 FROM trace_archives WHERE build_id = $1)`, job.ID).Scan(&chunks, &listed); err != nil {
			t.Fatal(err)
		}
		if chunks == 0 && !listed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log not archived after 20 s: %d chunks, listed %v", chunks, listed)
		}
		time.Sleep(20 * time.Millisecond)
	}

	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	page := b.get(fmt.Sprintf("/projects/1/jobs/%d", job.ID), http.StatusOK)
	for _, want := range []string{fmt.Sprintf(`id="L%d"`, lines), fmt.Sprintf("line %06d", lines), `<span class="term-fg32">`} {
		if !strings.Contains(page, want) {
			t.Errorf("the job page of an archived log lacks %q", want)
		}
	}
	first := b.get(fmt.Sprintf("/projects/1/jobs/%d?log_from=0", job.ID), http.StatusOK)
	if !strings.Contains(first, `id="L1"`) || !strings.Contains(first, "line 000001") {
		t.Error("the first window of an archived log is not its first lines")
	}
	if raw := b.get(fmt.Sprintf("/projects/1/jobs/%d/log/raw", job.ID), http.StatusOK); raw != log.String() {
		t.Errorf("raw archived log: %d bytes, want the %d of the log", len(raw), log.Len())
	}
}
