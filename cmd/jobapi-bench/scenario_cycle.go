package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/runnerclient"
)

var traceData = []byte("Running with gitlab-runner 19.4.0 (jobapi-bench)\n$ echo bench\nbench\nJob succeeded\n")

// cycle: R runners, each in a loop request → ack → one trace patch → success, until the
// seeded jobs are done.
func (e *env) cycle(ctx context.Context, rs []*runner, baseline float64) (*Result, error) {
	cfg := e.cfg
	if err := e.truncate(ctx); err != nil {
		return nil, err
	}
	if _, err := e.seed(ctx, seedSpec{N: cfg.CycleJobs, PerPipeline: cfg.PerPipeline, Status: "pending"}); err != nil {
		return nil, err
	}
	if err := e.analyze(ctx); err != nil {
		return nil, err
	}
	adjacent := e.adjacentBaseline(ctx)
	clients := e.fresh(rs[:cfg.Runners])
	defer closeIdle(clients)
	rec := newRecorder()
	var done atomic.Int64
	checksum := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(traceData))
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	var redisBefore redisCounts
	if e.redisCmds != nil {
		redisBefore = e.redisCmds.snapshot()
	}
	w := e.startWindow("cycle", true)
	loadgen(sctx, len(clients), func(ctx context.Context, i int) {
		c := clients[i]
		for ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			t := time.Now()
			job, res, err := c.RequestJob(withEndpoint(ctx, "request"))
			d := time.Since(t)
			if err != nil || (job == nil && res.Code != http.StatusNoContent) {
				rec.fail("request", callErr(err, res.Code))
				continue
			}
			if job == nil {
				// Nothing left that is not being claimed by another runner.
				rec.add("request_204", d)
				return
			}
			rec.add("request", d)

			t = time.Now()
			ur, err := c.UpdateJob(withEndpoint(ctx, "ack"), job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
			if err != nil || ur.Code != http.StatusOK {
				rec.fail("ack", callErr(err, ur.Code))
				continue
			}
			rec.add("ack", time.Since(t))

			t = time.Now()
			pr, err := c.PatchTrace(withEndpoint(ctx, "trace"), job, 0, traceData)
			if err != nil || pr.State != runnerclient.PatchSucceeded {
				rec.fail("trace", callErr(err, pr.Code))
				continue
			}
			rec.add("trace", time.Since(t))

			t = time.Now()
			ur, err = c.UpdateJob(withEndpoint(ctx, "finish"), job, runnerclient.StateSuccess,
				runnerclient.UpdateOptions{Checksum: checksum, Bytesize: len(traceData)})
			if err != nil || ur.Code != http.StatusOK {
				rec.fail("finish", callErr(err, ur.Code))
				continue
			}
			rec.add("finish", time.Since(t))
			done.Add(1)
		}
	})
	res := w.stop()

	r := e.result("cycle", res, rec)
	r.Unit = "jobs/s"
	r.Count = int(done.Load())
	r.Throughput = round3(float64(r.Count) / res.WallSeconds)
	r.Params = map[string]any{"runners": len(clients), "jobs": cfg.CycleJobs, "jobs_per_pipeline": cfg.PerPipeline,
		"trace_bytes": len(traceData)}
	queriesPer(r, res.queries, map[string]callKey{"request": {"request", http.StatusCreated},
		"request_204": {"request", http.StatusNoContent}, "ack": {"ack", 0}, "trace": {"trace", 0}, "finish": {"finish", 0}})
	if r.Count > 0 && e.queries != nil {
		r.Extra["pg_queries_per_job"] = round3(float64(res.queries.requestQueries()) / float64(r.Count))
	}
	if r.Count > 0 && e.redisCmds != nil {
		// Counted until the counts the rate limiter decided locally went out (its flush
		// follows the window by up to a SyncInterval).
		time.Sleep(250 * time.Millisecond)
		after := e.redisCmds.snapshot()
		r.Extra["redis_commands_per_job"] = round3(float64(after.total-redisBefore.total) / float64(r.Count))
		r.Extra["redis_rate_limit_commands_per_job"] = round3(float64(after.rateLimit-redisBefore.rateLimit) / float64(r.Count))
	}
	costPer(r, res, "job", r.Count)
	var twoPhase, succeeded int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE two_phase), count(*) FILTER (WHERE status = 'success')
FROM builds`).Scan(&twoPhase, &succeeded); err != nil {
		return nil, err
	}
	r.Extra["two_phase_builds"], r.Extra["succeeded_builds"] = twoPhase, succeeded
	if twoPhase < r.Count {
		return r, fmt.Errorf("cycle: only %d of %d jobs went through two-phase; is allow_runner_job_acknowledgement on?", twoPhase, r.Count)
	}
	e.ratioTarget(r, baseline, adjacent, 0.25, "jobs/s ÷ baseline UPDATE/s")
	return r, e.withStoreOnly(r, rec, "jobs", func() (storeOnly, error) {
		return e.cycleStoreOnly(sctx, rs[:cfg.Runners], rec, refBaseline(baseline, adjacent))
	})
}

// cycleStoreOnly: cycle's jobs through the service alone (twin), with the calls the runner
// endpoints make: RequestJob (two-phase), UpdateJob running, AppendTrace, UpdateJob success.
func (e *env) cycleStoreOnly(ctx context.Context, rs []*runner, rec *recorder, baseline float64) (storeOnly, error) {
	if err := e.truncate(ctx); err != nil {
		return storeOnly{}, err
	}
	if _, err := e.seed(ctx, seedSpec{N: e.cfg.CycleJobs, PerPipeline: e.cfg.PerPipeline, Status: "pending"}); err != nil {
		return storeOnly{}, err
	}
	if err := e.analyze(ctx); err != nil {
		return storeOnly{}, err
	}
	tw, err := e.newTwin(ctx)
	if err != nil {
		return storeOnly{}, err
	}
	defer tw.close()
	var done atomic.Int64
	start := time.Now()
	loadgen(ctx, e.cfg.Runners, func(ctx context.Context, i int) {
		r := rs[i%len(rs)]
		for ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			t := time.Now()
			err := tw.runJob(ctx, r)
			if errors.Is(err, errNoJob) {
				return
			}
			if err != nil {
				rec.fail("cycle_store_only", err)
				continue
			}
			rec.add("cycle_store_only", time.Since(t))
			done.Add(1)
		}
	})
	return tw.result(int(done.Load()), time.Since(start), baseline), nil
}

var errNoJob = errors.New("no job left")

// runJob takes one job for r and runs it to success, as cycle's runners do over HTTP.
func (t *twin) runJob(ctx context.Context, r *runner) error {
	a, err := t.svc.RequestJob(ctx, builds.JobRequest{Token: r.Token, SystemID: r.SystemID, TwoPhaseCapable: true})
	var noJob *builds.NoJobError
	if errors.As(err, &noJob) {
		return errNoJob
	}
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	id, token := a.Build.ID, a.JobToken
	if st, err := t.svc.UpdateJob(ctx, builds.JobUpdate{ID: id, Token: token, State: builds.StateRunning}); err != nil || st != builds.StatusRunning {
		return fmt.Errorf("ack of build %d: status %q: %v", id, st, err)
	}
	if _, err := t.svc.AppendTrace(ctx, id, token, 0, traceData); err != nil {
		return fmt.Errorf("trace of build %d: %w", id, err)
	}
	if st, err := t.svc.UpdateJob(ctx, builds.JobUpdate{ID: id, Token: token, State: builds.StateSuccess}); err != nil || st != builds.StatusSuccess {
		return fmt.Errorf("finish of build %d: status %q: %v", id, st, err)
	}
	return nil
}
