package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/jobapi/jobapi/builds/joblogs"
)

// archive: what archiving a finished job's log costs, alone. The cycle scenario's finishes
// list their builds for the archive worker, which runs behind the runners (it archives one
// build after the other): most of a cycle's archives happen after its window, so its CPU
// per job leaves them out. Here --archive-jobs finished builds, each with the cycle's log
// stored in Postgres as a finish leaves it (flushed, one chunk), are listed at once inside
// the window, and the replica's archive passes (TraceArchiver.PassOnce, back to back, with
// the server's label) archive them all: statements, machine CPU and tested CPU per archived
// log. Every build must end archived, its chunks gone; two logs are read back through the
// operator API, byte for byte.
func (e *env) archive(ctx context.Context) (*Result, error) {
	cfg := e.cfg
	if e.srv == nil {
		return nil, errors.New("archive: needs the in-process jobapi (not --url)")
	}
	if err := e.truncate(ctx); err != nil {
		return nil, err
	}
	ids, err := e.seed(ctx, seedSpec{N: cfg.ArchiveJobs, PerPipeline: cfg.PerPipeline, Status: "success", ReturnIDs: true})
	if err != nil {
		return nil, err
	}
	// Listed with a due time no pass reaches, so that nothing is archived before the window.
	if _, err := e.db.Exec(ctx, `
WITH c AS (
    INSERT INTO build_trace_chunks (build_id, offset_at, data) SELECT id, 0, $2 FROM unnest($1::bigint[]) id
), b AS (
    UPDATE builds SET trace_size = $3 WHERE id = ANY($1)
)
INSERT INTO trace_archives (build_id, due_at) SELECT id, 'infinity' FROM unnest($1::bigint[]) id`,
		ids, traceData, len(traceData)); err != nil {
		return nil, fmt.Errorf("archive: store the logs: %w", err)
	}
	if err := e.analyze(ctx); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	w := e.startWindow("archive", true)
	if _, err := e.db.Exec(sctx, `UPDATE trace_archives SET due_at = '-infinity'`); err != nil {
		return nil, err
	}
	var passes joblogs.ArchivePass
	// The duration of each pass; a pass may find nothing when the replica's own pass
	// claimed the batch first, which on a small run can be all of them.
	rec := newRecorder()
	for {
		var res joblogs.ArchivePass
		start := time.Now()
		pprof.Do(sctx, pprof.Labels(labelKey, "server"), func(ctx context.Context) {
			res, err = e.srv.Traces.PassOnce(ctx)
		})
		rec.add("pass", time.Since(start))
		if err != nil {
			return nil, fmt.Errorf("archive: pass: %w", err)
		}
		passes.Claimed += res.Claimed
		passes.Archived += res.Archived
		passes.Failed += res.Failed
		var left int
		if err := e.db.QueryRow(sctx, `SELECT count(*) FROM trace_archives`).Scan(&left); err != nil {
			return nil, err
		}
		if left == 0 {
			break
		}
		if res.Claimed == 0 {
			// Claimed by the replica's own pass: wait for it.
			time.Sleep(10 * time.Millisecond)
		}
	}
	res := w.stop()

	r := e.result("archive", res, rec)
	r.Unit = "archives/s"
	r.Count = len(ids)
	r.Throughput = round3(float64(r.Count) / res.WallSeconds)
	r.Params = map[string]any{"jobs": len(ids), "log_bytes": len(traceData)}
	costPer(r, res, "archive", r.Count)
	if r.BackgroundQueries >= 0 && r.Count > 0 {
		r.Extra["pg_queries_background_per_archive"] = round3(float64(r.BackgroundQueries) / float64(r.Count))
	}
	r.Extra["bench_pass_archived"] = passes.Archived
	r.Extra["bench_pass_failed"] = passes.Failed
	var artifacts, chunks int
	if err := e.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_artifacts WHERE file_type = 'trace'),
        (SELECT count(*) FROM build_trace_chunks)`).Scan(&artifacts, &chunks); err != nil {
		return r, err
	}
	if artifacts != len(ids) || chunks != 0 {
		return r, fmt.Errorf("archive: %d trace artifacts and %d chunks left, want %d and none", artifacts, chunks, len(ids))
	}
	for _, id := range []int64{ids[0], ids[len(ids)-1]} {
		got, err := e.jobLog(ctx, id)
		if err != nil {
			return r, fmt.Errorf("archive: read the log of job %d: %w", id, err)
		}
		if !bytes.Equal(got, traceData) {
			return r, fmt.Errorf("archive: job %d's archived log is %d bytes, not the %d stored", id, len(got), len(traceData))
		}
	}
	return r, nil
}
