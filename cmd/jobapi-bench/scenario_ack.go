package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/runnerclient"
)

// ack: only the ack path. The builds are already assigned (waiting_for_runner_ack with a job
// token each, as a claim leaves them); R runners acknowledge them as fast as they can.
func (e *env) ack(ctx context.Context, rs []*runner, baseline float64) (*Result, error) {
	cfg := e.cfg
	if err := e.truncate(ctx); err != nil {
		return nil, err
	}
	jobs, err := e.seedAssigned(ctx, cfg.AckJobs, cfg.PerPipeline, rs[:cfg.Runners])
	if err != nil {
		return nil, err
	}
	if err := e.analyze(ctx); err != nil {
		return nil, err
	}
	adjacent := e.adjacentBaseline(ctx)
	clients := e.fresh(rs[:cfg.Runners])
	defer closeIdle(clients)
	rec := newRecorder()
	var next atomic.Int64
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	w := e.startWindow("ack", true)
	loadgen(sctx, len(clients), func(ctx context.Context, i int) {
		c := clients[i]
		for ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			k := int(next.Add(1)) - 1
			if k >= len(jobs) {
				return
			}
			job := &runnerclient.Job{ID: jobs[k].ID, Token: jobs[k].Token}
			t := time.Now()
			ur, err := c.UpdateJob(withEndpoint(ctx, "ack"), job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
			if err != nil || ur.Code != http.StatusOK {
				rec.fail("ack", callErr(err, ur.Code))
				continue
			}
			rec.add("ack", time.Since(t))
		}
	})
	res := w.stop()
	r := e.result("ack", res, rec)
	r.Unit = "acks/s"
	r.Count = rec.count("ack")
	r.Throughput = round3(float64(r.Count) / res.WallSeconds)
	r.Params = map[string]any{"runners": len(clients), "jobs": cfg.AckJobs}
	queriesPer(r, res.queries, map[string]callKey{"ack": {"ack", 0}})
	costPer(r, res, "ack", r.Count)
	var running int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM builds WHERE status = 'running'`).Scan(&running); err != nil {
		return nil, err
	}
	r.Extra["running_builds"] = running
	e.ratioTarget(r, baseline, adjacent, 0.6, "acks/s ÷ baseline UPDATE/s")
	return r, e.withStoreOnly(r, rec, "acks", func() (storeOnly, error) {
		return e.ackStoreOnly(sctx, rs[:cfg.Runners], rec, refBaseline(baseline, adjacent))
	})
}

// ackStoreOnly: the ack path through the service alone (twin): UpdateJob with state=running,
// as the PUT handler calls it, on builds assigned as in ack.
func (e *env) ackStoreOnly(ctx context.Context, rs []*runner, rec *recorder, baseline float64) (storeOnly, error) {
	if err := e.truncate(ctx); err != nil {
		return storeOnly{}, err
	}
	jobs, err := e.seedAssigned(ctx, e.cfg.AckJobs, e.cfg.PerPipeline, rs)
	if err != nil {
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
	var next atomic.Int64
	start := time.Now()
	loadgen(ctx, e.cfg.Runners, func(ctx context.Context, i int) {
		for ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			k := int(next.Add(1)) - 1
			if k >= len(jobs) {
				return
			}
			t := time.Now()
			st, err := tw.svc.UpdateJob(ctx, builds.JobUpdate{ID: jobs[k].ID, Token: jobs[k].Token, State: builds.StateRunning})
			if err == nil && st != builds.StatusRunning {
				err = fmt.Errorf("ack of build %d: status %s", jobs[k].ID, st)
			}
			if err != nil {
				rec.fail("ack_store_only", err)
				continue
			}
			rec.add("ack_store_only", time.Since(t))
		}
	})
	return tw.result(rec.count("ack_store_only"), time.Since(start), baseline), nil
}
