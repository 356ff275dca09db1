package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/tcpproxy"
)

// overload: the pickup scenario's long-poll mode (a fleet of --pickup-runners held by
// JOBAPI_LONG_POLL=--pickup-long-poll, one job every --pickup-every) on a machine in trouble:
// the replica reaches Redis through a proxy that delays every answer by
// --overload-redis-latency (slower than the 500 ms Redis call timeout by default: Redis
// slow, not down), and --overload-burners processes spin a core each, both from the moment
// the fleet is warm. It reports pickup p50/p99/max, Postgres statements per job request,
// the fleet's answers by class (201, 204, 503+Retry-After, other statuses, transport),
// the bench process's peak RSS (jobapi; the fleet is a child process) and the warnings
// the replica logged. A job never picked up, one handed out twice, or an answer
// gitlab-runner would not retry (a status other than 201/204 or 429/503 with Retry-After,
// a transport error) fails the run.
func (e *env) overload(ctx context.Context, rs []*runner) (*Result, error) {
	if e.srv == nil {
		return nil, errors.New("overload needs the in-process jobapi (it starts a replica behind a slow Redis)")
	}
	cfg := e.cfg
	rec := newRecorder()
	m, err := e.pickupMode(ctx, rs, "overload", rec)
	r := e.result("overload", Resources{LoadAvg: loadAvg()}, rec)
	r.Unit = "jobs/s"
	r.Count = m.Jobs
	r.Throughput = round3(1 / cfg.PickupEvery.Seconds())
	r.Params = map[string]any{"runners": len(rs), "long_poll_s": cfg.PickupLongPoll.Seconds(), "jobs": cfg.PickupJobs,
		"every_s": cfg.PickupEvery.Seconds(), "idle_s": cfg.PickupIdle.Seconds(),
		"redis_latency_ms": cfg.OverloadRedisLatency.Milliseconds(), "burners": cfg.OverloadBurners}
	r.Extra["overload"] = m
	if o := m.Overload; o != nil {
		r.PeakRSSMB = o.PeakRSSMB
		e.logf("  overload: %d runners, Redis +%s, %d burners (load %.1f → %.1f): pickup p50 %s p99 %s max %s ms, "+
			"%s statements/request, answers %v, peak RSS %s MB, %d warnings logged (%d lines say \"queue version\"), fallback %v",
			len(rs), cfg.OverloadRedisLatency, cfg.OverloadBurners, o.LoadStart, o.LoadEnd, fmtF(m.Latency.P50), fmtF(m.Latency.P99),
			fmtF(m.Latency.Max), fmtF(o.StatementsPerRequest), m.Answers, fmtF(o.PeakRSSMB), o.Warnings, o.VersionLines, o.Fallback)
	}
	return r, err
}

// overloadStats is what the overload mode adds to a pickup mode's result.
type overloadStats struct {
	RedisLatencyMS int64   `json:"redis_latency_ms"`
	Burners        int     `json:"burners"`
	LoadStart      float64 `json:"load_avg_start"`
	LoadEnd        float64 `json:"load_avg_end"`
	// Requests the fleet sent from "go" to the end of the job phase, and Postgres
	// statements on behalf of requests over the idle and job phases ÷ those requests.
	Requests             int64   `json:"requests"`
	StatementsPerRequest float64 `json:"pg_statements_per_request"`
	PeakRSSMB            float64 `json:"peak_rss_mb"`
	// Warnings: records at WARN or above the replica logged; VersionLines those about the
	// queue version (main's per-request "queue version unavailable" line, or the summary).
	Warnings     int64 `json:"warnings_logged"`
	VersionLines int64 `json:"queue_version_log_lines"`
	// Fallback: the replica's jobapi_fallback_* and jobapi_shed_* counters, where it has them.
	Fallback map[string]float64 `json:"fallback,omitempty"`
}

// overloadRig is the overload mode's slow Redis, CPU burners and counted log.
type overloadRig struct {
	e       *env
	proxy   *tcpproxy.Proxy
	log     *countingHandler
	stopCPU func()
	once    sync.Once
	load0   float64
	pid     int
	// replicaURL is the replica's, for its /metrics.
	replicaURL string
}

func (e *env) newOverloadRig() (*overloadRig, error) {
	u, err := url.Parse(e.serverCfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("overload: Redis URL: %w", err)
	}
	p := tcpproxy.New(u.Host)
	if err := p.Start(); err != nil {
		return nil, err
	}
	return &overloadRig{e: e, proxy: p,
		log: &countingHandler{next: e.serverLog.Handler(), warnings: new(atomic.Int64), version: new(atomic.Int64)}}, nil
}

// configure points the replica at Redis through the proxy.
func (o *overloadRig) configure(c *server.Config) {
	u, _ := url.Parse(c.RedisURL)
	u.Host = o.proxy.Addr()
	c.RedisURL = u.String()
	c.RedisClusterAddrs = nil
}

// logger is the replica's logger (nil rig: the bench's).
func (o *overloadRig) logger() *slog.Logger {
	if o == nil {
		return nil
	}
	return slog.New(o.log)
}

// start slows Redis and saturates the CPU.
func (o *overloadRig) start() error {
	o.load0 = loadAvg()
	if o.pid = o.e.rssPID(); o.pid > 0 {
		resetPeakRSS(o.pid)
	}
	o.log.warnings.Store(0)
	o.log.version.Store(0)
	o.proxy.SetLatency(o.e.cfg.OverloadRedisLatency)
	stop, err := startBurners(o.e.cfg.OverloadBurners)
	if err != nil {
		return err
	}
	o.stopCPU = stop
	return nil
}

// stop ends the burners and the latency (once).
func (o *overloadRig) stop() {
	o.once.Do(func() {
		if o.stopCPU != nil {
			o.stopCPU()
		}
		o.proxy.SetLatency(0)
	})
}

func (o *overloadRig) stats(requests, statements int64) *overloadStats {
	s := &overloadStats{RedisLatencyMS: o.e.cfg.OverloadRedisLatency.Milliseconds(), Burners: o.e.cfg.OverloadBurners,
		LoadStart: o.load0, LoadEnd: loadAvg(), Requests: requests,
		Warnings: o.log.warnings.Load(), VersionLines: o.log.version.Load()}
	if requests > 0 {
		s.StatementsPerRequest = round3(float64(statements) / float64(requests))
	}
	if o.pid > 0 {
		s.PeakRSSMB = round3(peakRSSMB(o.pid))
	}
	s.Fallback = o.fallbackCounters()
	return s
}

// fallbackCounters reads the replica's jobapi_fallback_* and jobapi_shed_* samples (none
// before jobapi had them).
func (o *overloadRig) fallbackCounters() map[string]float64 {
	if o.replicaURL == "" {
		return nil
	}
	samples := metricSamples(context.Background(), o.replicaURL)
	if samples == nil {
		return nil
	}
	out := map[string]float64{}
	for series, v := range samples {
		if strings.HasPrefix(series, "jobapi_fallback_") || strings.HasPrefix(series, "jobapi_shed_") {
			out[series] = v
		}
	}
	return out
}

func (o *overloadRig) close() {
	o.stop()
	o.proxy.Stop()
}

// countingHandler counts the replica's warnings on their way to the bench's server log.
type countingHandler struct {
	next     slog.Handler
	warnings *atomic.Int64
	version  *atomic.Int64
}

func (h *countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warnings.Add(1)
		if msg := strings.ToLower(r.Message); strings.Contains(msg, "queue version") || strings.Contains(msg, "redis did not answer") {
			h.version.Add(1)
		}
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{next: h.next.WithAttrs(as), warnings: h.warnings, version: h.version}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{next: h.next.WithGroup(name), warnings: h.warnings, version: h.version}
}
