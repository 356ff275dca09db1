package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
)

// idle: N runners with nothing to do poll every interval, each echoing last_update, while a
// backlog of builds for another runner pool is pending. The memory target is read here too.
func (e *env) idle(ctx context.Context, rs []*runner) (*Result, error) {
	cfg := e.cfg
	if err := e.truncate(ctx); err != nil {
		return nil, err
	}
	if cfg.IdleBacklog > 0 {
		// Tagged for runners that are not polling: pending, but nobody here may take them.
		if _, err := e.seed(ctx, seedSpec{N: cfg.IdleBacklog, PerPipeline: cfg.PerPipeline, Status: "pending",
			Tags: []string{"bench-backlog"}}); err != nil {
			return nil, err
		}
		if err := e.analyze(ctx); err != nil {
			return nil, err
		}
	}
	rec := newRecorder()
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	// The peak RSS counts from the warm-up on, when every runner connects and asks Postgres
	// once; CPU and queries only over the measured phase.
	runtimeReset()
	if pid := e.rssPID(); pid > 0 {
		resetPeakRSS(pid)
	}
	warmStart := time.Now()
	var w *window
	var warm time.Duration
	between := func() {
		warm = time.Since(warmStart)
		w = e.startWindow("idle", false)
	}
	var fleet fleetUsage
	if cfg.IdleFleetProcess {
		var err error
		if fleet, err = e.runFleetProcess(sctx, rs, rec, between); err != nil {
			return nil, err
		}
	} else {
		clients := e.fresh(rs)
		defer closeIdle(clients)
		cs := make([]*runnerclient.Client, len(clients))
		for i, c := range clients {
			cs[i] = c.Client
		}
		pollFleet(sctx, cs, cfg.IdleInterval, cfg.IdleDuration, rec, between)
	}
	res := w.stop()
	r := e.result("idle", res, rec)
	r.Unit = "polls/s"
	r.Count = rec.count("poll")
	r.Throughput = round3(float64(r.Count) / res.WallSeconds)
	r.Params = map[string]any{"runners": len(rs), "interval_s": cfg.IdleInterval.Seconds(),
		"duration_s": cfg.IdleDuration.Seconds(), "pending_backlog": cfg.IdleBacklog, "fleet_process": cfg.IdleFleetProcess}
	r.Extra["warmup_s"] = round3(warm.Seconds())
	if cfg.IdleFleetProcess {
		r.Extra["fleet_process"] = fleet
	}
	p := rec.summary()["poll"]
	rssTarget := Target{Name: fmt.Sprintf("peak RSS, %d pending and %d runners", cfg.IdleBacklog, len(rs)),
		Want: "< 150 MB", Got: res.PeakRSSMB, Unit: "MB", Met: res.PeakRSSMB > 0 && res.PeakRSSMB < 150}
	if e.queries != nil {
		// Every request in the window is a poll.
		q := float64(res.queries.requestQueries()) / float64(max(r.Count, 1))
		r.QueriesPerRequest = map[string]float64{"poll": round3(q)}
		r.Targets = append(r.Targets, Target{Name: "Postgres queries per idle poll", Want: "0", Got: round3(q),
			Met: r.Count > 0 && res.queries.requestQueries() == 0})
	}
	r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("idle poll p99, %d runners every %s", len(rs), cfg.IdleInterval),
		Want: "< 5 ms", Got: p.P99, Unit: "ms", Met: p.N > 0 && p.P99 < 5})
	costPer(r, res, "poll", r.Count)
	switch {
	case e.srv != nil && cfg.IdleFleetProcess:
		rssTarget.Name += " (bench process: jobapi; the runners in a child process)"
	case e.srv != nil:
		rssTarget.Name += " (bench process: jobapi plus the runners' clients)"
	}
	r.Targets = append(r.Targets, rssTarget)
	return r, nil
}
