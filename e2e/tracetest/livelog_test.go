package tracetest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// A running job's log is split between Postgres (whole chunks) and the Redis tail; every
// reader sees one log: the operator's trace, the web UI's ranges and line counts across the
// split, trace_size, and builds.LiveLog (the archive's reader). After the final update the
// log is all in Postgres, the replica archives it (LiveLog.Open of the finished build) and
// Drop deletes it, leaving the job refusing PATCHes.
func TestLiveLogReads(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.TraceChunkSize = 1 << 10 }})
	p, job := inst.LegacyJob(t, nil)
	ctx := context.Background()
	var log bytes.Buffer
	for i := range 10 {
		var chunk bytes.Buffer
		for chunk.Len() < 700 {
			fmt.Fprintf(&chunk, "patch %d line %d\n", i, chunk.Len())
		}
		resp, b := jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, log.Len(), chunk.Bytes())
		jobapitest.WantStatus(t, resp, b, http.StatusAccepted)
		log.Write(chunk.Bytes())
	}
	want := log.Bytes()
	durable := jobapitest.QueryInt(t, inst.Pool, "SELECT trace_size FROM builds WHERE id = $1", job.ID)
	if durable == 0 || durable >= len(want) || durable%1024 != 0 {
		t.Fatalf("Postgres holds %d of %d bytes; want whole KiB chunks and a live tail", durable, len(want))
	}

	if got := inst.Job(t, 7, job.ID).TraceSize; got != int64(len(want)) {
		t.Errorf("trace_size %d, want %d", got, len(want))
	}
	resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/7/jobs/%d/trace", job.ID), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if !bytes.Equal(b, want) {
		t.Errorf("operator trace: %d bytes, want %d", len(b), len(want))
	}
	for _, r := range []struct{ from, max int64 }{
		{0, 100}, {int64(durable) - 50, 100}, {int64(durable), 10_000}, {100, 1 << 20}, {int64(len(want)) - 1, 5}, {int64(len(want)) + 10, 5},
	} {
		data, size, err := inst.Logs.TraceRange(ctx, 7, job.ID, r.from, r.max)
		from := min(r.from, int64(len(want)))
		if exp := want[from:min(from+r.max, int64(len(want)))]; err != nil || size != int64(len(want)) || !bytes.Equal(data, exp) {
			t.Errorf("TraceRange(%d, %d): %d bytes of %d, err %v; want %d bytes of %d", r.from, r.max, len(data), size, err, len(exp), len(want))
		}
	}
	for _, before := range []int64{int64(durable) / 2, int64(durable), int64(durable) + 300, int64(len(want))} {
		n, err := inst.Logs.TraceLines(ctx, job.ID, before)
		if exp := int64(bytes.Count(want[:before], []byte("\n"))); err != nil || n != exp {
			t.Errorf("TraceLines(%d): %d, err %v; want %d", before, n, err, exp)
		}
	}
	readLive := func(what string) []byte {
		t.Helper()
		r, err := inst.Service.LiveLog().Open(ctx, job.ID)
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		defer r.Close()
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		return got
	}
	if got := readLive("running"); !bytes.Equal(got, want) {
		t.Errorf("LiveLog of the running job: %d bytes, want %d", len(got), len(want))
	}
	if err := inst.Service.LiveLog().Drop(ctx, job.ID); err == nil {
		t.Errorf("Drop of a running job's log: no error")
	}

	resp, b = jobapitest.UpdateJob(t, inst.URL, job.ID, job.Token, map[string]any{"state": "success", "output": map[string]any{"bytesize": len(want)}})
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if got := jobapitest.QueryInt(t, inst.Pool, "SELECT trace_size FROM builds WHERE id = $1", job.ID); got != len(want) {
		t.Errorf("after the final update Postgres holds %d bytes, want the whole log (%d)", got, len(want))
	}
	// The replica archives the log at once after the final update: its worker reads the
	// finished build's log with LiveLog.Open (which fences the tail first) and then Drops
	// it. Reading or dropping it here as well raced that worker (a read between its Redis
	// and Postgres drops saw the tail's base past empty chunks: a gap). So the finished
	// log is checked as the archive got it, and the drop by what it left.
	archived := waitTraceArchived(t, inst, 7, job.ID)
	for _, a := range archived.Artifacts {
		if a.FileType == "trace" && a.Size != int64(len(want)) {
			t.Errorf("archived log: %d bytes, want %d", a.Size, len(want))
		}
	}
	// The archive commits its artifact, then drops the live log, then takes the build off
	// its list.
	testenv.Eventually(t, 30*time.Second, "the build off the archive list", func() bool {
		return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM trace_archives WHERE build_id = $1", job.ID) == 0
	})
	resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/7/jobs/%d/trace", job.ID), nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if !bytes.Equal(b, want) {
		t.Errorf("archived trace: %d bytes, want the log read from Postgres and Redis (%d)", len(b), len(want))
	}
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM build_trace_chunks WHERE build_id = $1", job.ID); n != 0 {
		t.Errorf("%d chunks left after the archive's Drop", n)
	}
	if got := readLive("archived"); len(got) != 0 {
		t.Errorf("LiveLog after the archive's Drop: %d bytes, want none", len(got))
	}
	// A second Drop (a claim whose lease ran out finds the log archived and drops again).
	if err := inst.Service.LiveLog().Drop(ctx, job.ID); err != nil {
		t.Fatalf("Drop: %v", err)
	}
	resp, b = jobapitest.PatchTrace(t, inst.URL, job.ID, job.Token, len(want), []byte("late\n"))
	jobapitest.WantJSONError(t, resp, b, http.StatusForbidden)
	jobapitest.WantJobStatus(t, resp, "success")
	if st := inst.Pipeline(t, p).Status; st != "success" {
		t.Errorf("pipeline %s, want success", st)
	}
}
