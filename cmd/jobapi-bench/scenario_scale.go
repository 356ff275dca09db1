package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"
)

// scalePoint is one measurement of the claim latency.
type scalePoint struct {
	Pending int     `json:"pending"`
	History int     `json:"history"`
	Claims  int     `json:"claims"`
	P50     float64 `json:"p50_ms"`
	P95     float64 `json:"p95_ms"`
	P99     float64 `json:"p99_ms"`
	Queries float64 `json:"pg_queries_per_claim,omitempty"`
	PerSec  float64 `json:"claims_per_s"`
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// scale: claim latency (two-phase POST /jobs/request answered 201) as the number of pending
// builds grows, and with a large history of finished builds. Each point starts from empty
// tables, seeds N + M pending builds, and M claims are measured, so the queue holds between
// N + M and N builds meanwhile.
func (e *env) scale(ctx context.Context, rs []*runner) (*Result, error) {
	cfg := e.cfg
	type point struct {
		pending, history int
		again            bool
	}
	var points []point
	for _, n := range cfg.ScaleSizes {
		if cfg.ScaleMax <= 0 || n <= cfg.ScaleMax {
			points = append(points, point{pending: n})
		}
	}
	if len(points) == 0 {
		return nil, fmt.Errorf("scale: no size within --scale-max %d", cfg.ScaleMax)
	}
	history := cfg.ScaleHistory
	if cfg.ScaleMax > 0 {
		history = min(history, cfg.ScaleMax)
	}
	if history > 0 {
		points = append(points, point{pending: points[0].pending, history: history})
	}
	// The first point once more at the end: how much two runs of the same point differ on
	// this machine is the yardstick for "nothing measurable".
	points = append(points, point{pending: points[0].pending, again: true})
	rec := newRecorder()
	var measured []scalePoint
	var order []string
	var total Resources
	for _, p := range points {
		if err := e.truncate(ctx); err != nil {
			return nil, err
		}
		name := "claim@" + humanCount(p.pending)
		if p.again {
			name += " again"
		}
		if p.history > 0 {
			name += "+" + humanCount(p.history) + " history"
			if _, err := e.seed(ctx, seedSpec{N: p.history, PerPipeline: cfg.PerPipeline, Status: "success", Name: "history"}); err != nil {
				return nil, err
			}
		}
		claims := min(cfg.ScaleClaims, p.pending)
		if _, err := e.seed(ctx, seedSpec{N: p.pending + claims, PerPipeline: cfg.PerPipeline, Status: "pending"}); err != nil {
			return nil, err
		}
		if err := e.analyze(ctx); err != nil {
			return nil, err
		}
		e.logf("  %s: %d claims by %d runners", name, claims, cfg.ScaleRunners)
		clients := e.fresh(rs[:cfg.ScaleRunners])
		var tickets atomic.Int64
		sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
		window := "scale-" + humanCount(p.pending)
		if p.history > 0 {
			window += "-history"
		} else if p.again {
			window += "-again"
		}
		w := e.startWindow(window, true)
		loadgen(sctx, len(clients), func(ctx context.Context, i int) {
			c := clients[i]
			for ctx.Err() == nil && tickets.Add(1) <= int64(claims) && rec.totalErrors() <= maxErrors {
				t := time.Now()
				job, res, err := c.RequestJob(withEndpoint(ctx, "claim"))
				d := time.Since(t)
				if err != nil || job == nil {
					rec.fail(name, callErr(err, res.Code))
					continue
				}
				rec.add(name, d)
			}
		})
		res := w.stop()
		cancel()
		closeIdle(clients)
		l := rec.summary()[name]
		sp := scalePoint{Pending: p.pending, History: p.history, Claims: l.N, P50: l.P50, P95: l.P95, P99: l.P99,
			PerSec: round3(float64(l.N) / res.WallSeconds)}
		if v, ok := res.queries.per("claim", http.StatusCreated); ok {
			sp.Queries = v
		}
		measured = append(measured, sp)
		order = append(order, name)
		total.WallSeconds += res.WallSeconds
		total.ProcessCPU += res.ProcessCPU
		total.ServerCPU += res.ServerCPU
		total.LoadGenCPU += res.LoadGenCPU
		total.RuntimeCPU += res.RuntimeCPU
		total.PeakRSSMB = max(total.PeakRSSMB, res.PeakRSSMB)
		total.CPUAttribution = res.CPUAttribution
		total.GoHeapMB, total.GoStackMB, total.GoSysMB = res.GoHeapMB, res.GoStackMB, res.GoSysMB
		total.Goroutines, total.LoadAvg = res.Goroutines, max(total.LoadAvg, res.LoadAvg)
		total.queries.other += res.queries.other
		if total.queries.byRoute == nil {
			total.queries.byRoute = map[string]int64{}
		}
		for k, v := range res.queries.byRoute {
			total.queries.byRoute[k] += v
		}
	}
	for _, k := range []*float64{&total.WallSeconds, &total.ProcessCPU, &total.ServerCPU, &total.LoadGenCPU, &total.RuntimeCPU} {
		*k = round3(*k)
	}
	r := e.result("scale", total, rec)
	r.order = order
	r.Unit = "claims/s"
	for _, m := range measured {
		r.Count += m.Claims
	}
	r.Throughput = round3(float64(r.Count) / total.WallSeconds)
	r.Params = map[string]any{"runners": cfg.ScaleRunners, "jobs_per_pipeline": cfg.PerPipeline}
	r.Extra["points"] = measured
	if e.queries != nil {
		r.QueriesPerRequest = map[string]float64{}
		for i, m := range measured {
			r.QueriesPerRequest[order[i]] = m.Queries
		}
	}
	// measured: the sizes in order, then the history point (if any), then the first size again.
	first, again := measured[0], measured[len(measured)-1]
	ref := (first.P99 + again.P99) / 2
	r.Extra["reference_p99_ms"] = round3(ref)
	if ref > 0 {
		r.Extra["reference_p99_spread"] = round3(math.Abs(first.P99-again.P99) / ref)
	}
	var top scalePoint
	for _, m := range measured[:len(measured)-1] {
		if m.History == 0 && m.Pending > top.Pending {
			top = m
		}
	}
	if top.Pending > first.Pending && ref > 0 {
		ratio := round3(top.P99 / ref)
		r.Targets = append(r.Targets, Target{
			Name: fmt.Sprintf("claim p99 at %s pending ÷ at %s (mean of its two runs)", humanCount(top.Pending), humanCount(first.Pending)),
			Want: "≤ 2", Got: ratio, Met: ratio <= 2})
	}
	if hist := measured[len(measured)-2]; hist.History > 0 && ref > 0 {
		// "Nothing measurable": no worse than the slower of the two runs without history,
		// plus a quarter.
		ratio := round3(hist.P99 / ref)
		r.Targets = append(r.Targets, Target{
			Name: fmt.Sprintf("claim p99 with %s finished builds ÷ without (%s pending)", humanCount(hist.History), humanCount(hist.Pending)),
			Want: fmt.Sprintf("≤ %.2f (slower run without × 1.25)", max(first.P99, again.P99)*1.25/ref),
			Got:  ratio, Met: hist.P99 <= max(first.P99, again.P99)*1.25})
	}
	return r, nil
}
