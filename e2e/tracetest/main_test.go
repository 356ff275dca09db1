// Package tracetest_test checks job logs end to end: a runner's PATCHes and the log's size
// limit, the live log read across its parts, coverage taken from the archived log; every way a
// build finishes archives its log into the object store as its trace artifact and drops the
// live chunks; the trace API serves the archive or the live log with HTTP ranges; an object
// store outage or a replica SIGKILLed around the finish delays an archive and loses no byte;
// two replicas archiving at once never archive a log twice; PATCHes racing a job's finish on
// two replicas never get a 202 after it (finishrace_test.go); a log streamed while Redis
// restarts or refuses writes stays whole (redis_test.go). Real replicas on real Postgres and
// Redis, the store on disk or on a real S3-protocol server (testenv.S3).
package tracetest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// start is jobapitest.Start with a small Postgres pool (the suites run many replicas at
// once) and, with s3, the object store on that server.
func start(t *testing.T, o jobapitest.Options, s3 *testenv.S3Server) *jobapitest.Instance {
	t.Helper()
	configure := o.Configure
	o.Configure = func(c *server.Config) {
		c.DatabaseMaxConns = 4
		if s3 != nil {
			c.ObjectStore = s3.URL()
			c.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey}
		}
		if configure != nil {
			configure(c)
		}
	}
	return jobapitest.Start(t, o)
}

func jobPath(projectID, id int64) string {
	return fmt.Sprintf("/api/v4/projects/%d/jobs/%d", projectID, id)
}

// appendLog sends log to the job in patches of at most 1 MiB, as gitlab-runner does.
func appendLog(t testing.TB, r *jobapitest.Runner, job *runnerclient.Job, log []byte) {
	t.Helper()
	for off := 0; off < len(log); {
		n := min(len(log)-off, 1<<20)
		if res := r.Patch(t, job, off, string(log[off:off+n])); res.Code != http.StatusAccepted {
			t.Fatalf("PATCH trace at %d: %d", off, res.Code)
		}
		off += n
	}
}

// makeLog is n bytes of log lines.
func makeLog(n int, seed string) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s line %d \x1b[32mok\x1b[0m %s\n", seed, i, strings.Repeat("x", i%97))
	}
	return b.Bytes()[:n]
}

// getTrace reads the operator's trace endpoint.
func getTrace(t testing.TB, inst *jobapitest.Instance, projectID, id int64, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return inst.Do(t, "GET", jobPath(projectID, id)+"/trace", nil, hdr...)
}

// traceArtifact returns the job's trace artifact as the job view lists it (nil: none).
func traceArtifact(t testing.TB, inst *jobapitest.Instance, projectID, id int64) *api.JobArtifact {
	t.Helper()
	var d api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", jobPath(projectID, id), nil, &d)
	for _, a := range d.Artifacts {
		if a.FileType == "trace" {
			return &a
		}
	}
	return nil
}

// liveState counts a build's live chunks and whether it is listed for archiving.
func liveState(t testing.TB, inst *jobapitest.Instance, id int64) (chunks int, listed bool) {
	t.Helper()
	err := inst.Pool.QueryRow(context.Background(), `SELECT
        (SELECT count(*) FROM build_trace_chunks WHERE build_id = $1),
        EXISTS (SELECT 1 FROM trace_archives WHERE build_id = $1)`, id).Scan(&chunks, &listed)
	if err != nil {
		t.Fatal(err)
	}
	return chunks, listed
}

// wantArchived checks that a job's log is archived whole: the trace artifact has the log's
// size, the trace API serves the log, no live chunk is left and the build is off the list.
func wantArchived(t testing.TB, inst *jobapitest.Instance, projectID, id int64, log []byte) {
	t.Helper()
	a := traceArtifact(t, inst, projectID, id)
	if a == nil {
		t.Fatalf("job %d: no trace artifact", id)
	}
	if a.Size != int64(len(log)) || a.Filename != "job.log" || a.FileFormat != "raw" || a.ExpireAt != nil {
		t.Errorf("job %d: trace artifact %+v, want job.log, raw, %d bytes, never expiring", id, *a, len(log))
	}
	resp, b := getTrace(t, inst, projectID, id)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, log) {
		t.Errorf("job %d: trace %d, %d bytes; want 200 and the %d bytes of the log", id, resp.StatusCode, len(b), len(log))
	}
	if resp.Header.Get("ETag") == "" {
		t.Errorf("job %d: an archived log without ETag", id)
	}
	if chunks, listed := liveState(t, inst, id); chunks != 0 || listed {
		t.Errorf("job %d: %d live chunks left, listed %v; want none, off the list", id, chunks, listed)
	}
}

// passOnce runs the instance's archive pass once (every due batch).
func passOnce(t testing.TB, inst *jobapitest.Instance) {
	t.Helper()
	if _, err := inst.Traces.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitArchived waits for the immediate archive that follows a runner's final update.
func waitArchived(t testing.TB, inst *jobapitest.Instance, projectID, id int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for traceArtifact(t, inst, projectID, id) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("job %d: log not archived after 20 s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		if _, listed := liveState(t, inst, id); !listed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: still listed for archiving after 20 s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
