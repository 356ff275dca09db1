package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
)

// traceLog is one job's log as the trace scenario streams it: TracePatches patches of
// TracePatchSize bytes each, lines of printable text like a build's output.
func traceLog(patches, size int) []byte {
	line := []byte("$ make test   ok  \tgithub.com/jobapi/jobapi/builds\t0.123s coverage: 81.2% of statements\n")
	var b bytes.Buffer
	for b.Len() < patches*size {
		b.Write(line)
	}
	return b.Bytes()[:patches*size]
}

// trace: R runners each claim a job, then stream its log in many PATCHes back to back (what
// a chatty job's runner sends over its life, compressed in time), then send the final
// update. The numbers that matter are per PATCH: Postgres statements, server CPU.
func (e *env) trace(ctx context.Context, rs []*runner) (*Result, error) {
	cfg := e.cfg
	if err := e.truncate(ctx); err != nil {
		return nil, err
	}
	if _, err := e.seed(ctx, seedSpec{N: cfg.Runners, PerPipeline: cfg.PerPipeline, Status: "pending"}); err != nil {
		return nil, err
	}
	if err := e.analyze(ctx); err != nil {
		return nil, err
	}
	clients := e.fresh(rs[:cfg.Runners])
	defer closeIdle(clients)
	log := traceLog(cfg.TracePatches, cfg.TracePatchSize)
	checksum := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(log))
	jobs := make([]*runnerclient.Job, len(clients))
	rec := newRecorder()
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	// Claim and ack outside the measured window: the window holds PATCHes only, and the
	// final updates after them.
	loadgen(sctx, len(clients), func(ctx context.Context, i int) {
		job, res, err := clients[i].RequestJob(withEndpoint(ctx, "request"))
		if err != nil || job == nil {
			rec.fail("request", callErr(err, res.Code))
			return
		}
		if ur, err := clients[i].UpdateJob(withEndpoint(ctx, "ack"), job, runnerclient.StateRunning, runnerclient.UpdateOptions{}); err != nil || ur.Code != http.StatusOK {
			rec.fail("ack", callErr(err, ur.Code))
			return
		}
		jobs[i] = job
	})
	var patches, finished atomic.Int64
	w := e.startWindow("trace", true)
	loadgen(sctx, len(clients), func(ctx context.Context, i int) {
		c, job := clients[i], jobs[i]
		if job == nil {
			return
		}
		for off := 0; off < len(log) && ctx.Err() == nil; {
			t := time.Now()
			pr, err := c.PatchTrace(withEndpoint(ctx, "trace"), job, off, log[off:off+cfg.TracePatchSize])
			if err != nil || pr.State != runnerclient.PatchSucceeded {
				rec.fail("trace", callErr(err, pr.Code))
				return
			}
			rec.add("trace", time.Since(t))
			patches.Add(1)
			off = pr.Offset
		}
		t := time.Now()
		ur, err := c.UpdateJob(withEndpoint(ctx, "finish"), job, runnerclient.StateSuccess,
			runnerclient.UpdateOptions{Checksum: checksum, Bytesize: len(log)})
		if err != nil || ur.Code != http.StatusOK {
			rec.fail("finish", callErr(err, ur.Code))
			return
		}
		rec.add("finish", time.Since(t))
		finished.Add(1)
	})
	res := w.stop()

	r := e.result("trace", res, rec)
	r.Unit = "patches/s"
	r.Count = int(patches.Load())
	r.Throughput = round3(float64(r.Count) / res.WallSeconds)
	r.Params = map[string]any{"runners": len(clients), "patches_per_job": cfg.TracePatches, "patch_bytes": cfg.TracePatchSize}
	queriesPer(r, res.queries, map[string]callKey{"trace": {"trace", 0}, "finish": {"finish", 0}})
	costPer(r, res, "patch", r.Count)
	r.Extra["finished_jobs"] = finished.Load()
	// The log each job ends with must be the one sent, byte for byte.
	for i, job := range jobs {
		if job == nil {
			continue
		}
		got, err := e.jobLog(ctx, job.ID)
		if err != nil {
			return r, fmt.Errorf("trace: read the log of job %d: %w", job.ID, err)
		}
		if !bytes.Equal(got, log) {
			return r, fmt.Errorf("trace: job %d (runner %d) stored %d bytes, not the %d sent", job.ID, i, len(got), len(log))
		}
	}
	return r, nil
}

// jobLog reads a job's whole log through the operator API, as an operator would.
func (e *env) jobLog(ctx context.Context, id int64) ([]byte, error) {
	var project int64
	if err := e.db.QueryRow(ctx, `SELECT project_id FROM builds WHERE id = $1`, id).Scan(&project); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v4/projects/%d/jobs/%d/trace", e.baseURL, project, id), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("PRIVATE-TOKEN", e.adminToken)
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET trace: %d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, err
}
