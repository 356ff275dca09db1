package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// sweep: K builds whose ack expired among W waiting; the time until the sweeper has failed
// and retried all K, then what a sweep with nothing expired costs.
func (e *env) sweep(ctx context.Context) (*Result, error) {
	cfg := e.cfg
	if err := e.truncate(ctx); err != nil {
		return nil, err
	}
	if _, err := e.seed(ctx, seedSpec{N: cfg.SweepWaiting - cfg.SweepExpired, PerPipeline: cfg.PerPipeline,
		Status: "waiting_for_runner_ack", Name: "waiting"}); err != nil {
		return nil, err
	}
	expiring, err := e.seed(ctx, seedSpec{N: cfg.SweepExpired, PerPipeline: cfg.PerPipeline,
		Status: "waiting_for_runner_ack", Name: "expiring", ReturnIDs: true})
	if err != nil {
		return nil, err
	}
	if err := e.analyze(ctx); err != nil {
		return nil, err
	}
	rec := newRecorder()
	budget := 3*cfg.SweepInterval + 5*time.Second
	w := e.startWindow("sweep", true)
	// No ack key and a deadline of record that just passed: what a runner that never
	// acknowledged leaves behind.
	if _, err := e.db.Exec(ctx, `UPDATE builds SET ack_deadline = now() WHERE id = ANY($1)`, expiring); err != nil {
		return nil, err
	}
	t0 := time.Now()
	var failed, retried int
	for {
		// Through the status and pending indexes: cheap enough not to slow the sweeper down.
		if err := e.db.QueryRow(ctx, `
SELECT (SELECT count(*) FROM builds WHERE status = 'failed' AND failure_reason = 'runner_provisioning_timeout'),
       (SELECT count(*) FROM builds WHERE status = 'pending' AND retry_of IS NOT NULL)`).Scan(&failed, &retried); err != nil {
			return nil, err
		}
		if (failed >= len(expiring) && retried >= len(expiring)) || time.Since(t0) > cfg.ScenarioTimeout || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	elapsed := time.Since(t0)
	res := w.stop()
	rec.add("sweep_expired", elapsed)
	if failed != len(expiring) || retried != len(expiring) {
		rec.fail("sweep_expired", fmt.Errorf("after %s: %d of %d failed, %d retried", elapsed.Round(time.Millisecond),
			failed, len(expiring), retried))
	}

	r := e.result("sweep", res, rec)
	r.Unit = "timeouts/s"
	r.Count = failed
	r.Throughput = round3(float64(failed) / elapsed.Seconds())
	r.Params = map[string]any{"waiting": cfg.SweepWaiting, "expired": cfg.SweepExpired,
		"sweep_interval_s": cfg.SweepInterval.Seconds()}
	r.Targets = []Target{{Name: fmt.Sprintf("%d expired among %d waiting, all failed and retried", cfg.SweepExpired, cfg.SweepWaiting),
		Want: fmt.Sprintf("≤ %.0f s (3 intervals + 5 s)", budget.Seconds()), Got: round3(elapsed.Seconds()), Unit: "s",
		Met: failed == len(expiring) && retried == len(expiring) && elapsed <= budget}}

	// A sweep with nothing expired among the W waiting (the K are failed now): its database
	// time, from the tracer, around the sweeper's own SweepOnce.
	if e.srv != nil {
		var samples []time.Duration
		var queries int64
		for range 20 {
			clock := &dbClock{}
			t := time.Now()
			rep, err := e.srv.Sweeper.SweepOnce(withDBClock(ctx, clock))
			wall := time.Since(t)
			if err != nil {
				rec.fail("sweep_empty", err)
				continue
			}
			if rep.TimedOut > 0 {
				rec.fail("sweep_empty", errors.New("an empty sweep timed builds out"))
			}
			rec.add("sweep_empty", wall)
			samples = append(samples, time.Duration(clock.nanos.Load()))
			queries = clock.queries.Load()
		}
		db := summarize(samples)
		r.Extra["sweep_empty_db_ms_p50"] = db.P50
		r.Extra["sweep_empty_db_ms_max"] = db.Max
		r.Extra["sweep_empty_queries"] = queries
		r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("empty sweep among %d waiting: database time (max of %d)",
			cfg.SweepWaiting-cfg.SweepExpired, db.N), Want: "< 20 ms", Got: db.Max, Unit: "ms", Met: db.N > 0 && db.Max < 20})
	}
	r.Endpoints = rec.summary()
	r.Errors = rec.totalErrors()
	return r, nil
}
