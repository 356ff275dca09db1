package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/server"
)

// memory: what a replica holds while --pickup-runners runners long-poll it
// (JOBAPI_LONG_POLL=--pickup-long-poll, each request held until it ends, then asked again
// at once) with --idle-backlog builds pending for other runners: the peak RSS from the
// fleet's first request on (the warm-up, when every runner's first poll goes to Postgres,
// included), the RSS while every request is held, what the Go runtime says it holds (heap,
// goroutine stacks, goroutines) and the process's CPU meanwhile. With --profile-dir it
// keeps the replica's heap and goroutine profiles taken while the fleet is held.
//
// The fleet is a child process; the bench process holds the replica under test, the first
// (idle) replica and the bench itself, measured before the replica starts (base).
func (e *env) memory(ctx context.Context, fleet []fleetRunner) (*Result, error) {
	cfg := e.cfg
	if e.srv == nil {
		return nil, errors.New("memory needs the in-process jobapi (it starts the long-poll replica)")
	}
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
	pid := osGetpid()
	runtimeReset()
	baseMB := rssMB(pid)
	resetPeakRSS(pid)
	load0 := loadAvg()
	srv, err := e.startReplica(func(c *server.Config) { c.LongPoll = cfg.PickupLongPoll }, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := srv.Close(); err != nil {
			e.logf("long-poll jobapi stopped: %v", err)
		}
	}()
	pool := watchRedisPool(srv)
	q0 := e.queries.snapshot()
	sctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	fp, err := e.startFleetProcess(sctx)
	if err != nil {
		return nil, err
	}
	cmd, stdin, out, send := fp.cmd, fp.stdin, fp.out, fp.send
	m := memoryStats{Runners: len(fleet), Backlog: cfg.IdleBacklog, LongPollS: cfg.PickupLongPoll.Seconds(), BaseRSSMB: baseMB,
		LoadStart: load0}
	var rec *recorder
	res, runErr := func() (pickupFleetResult, error) {
		var res pickupFleetResult
		warmStart := time.Now()
		spec := fleetSpec{BaseURL: srv.URL, Runners: fleet, Interval: cfg.PickupInterval, Pickup: true, LongPoll: true}
		if err := json.NewEncoder(stdin).Encode(spec); err != nil {
			return res, err
		}
		if line, err := out.ReadString('\n'); err != nil || line != "warm\n" {
			return res, fmt.Errorf("fleet process: want warm, got %q: %v", line, err)
		}
		m.WarmupS = round3(time.Since(warmStart).Seconds())
		q1 := e.queries.snapshot()
		m.WarmupStatements = q1.sub(q0).requestQueries()
		if err := send("go"); err != nil {
			return res, err
		}
		// Every runner asks again within an interval and is then held.
		sleepCtx(sctx, cfg.PickupInterval+time.Second)
		tested := e.snapshotTested(sctx)
		start := time.Now()
		var samples []float64
		for time.Since(start) < cfg.IdleDuration && sctx.Err() == nil {
			sleepCtx(sctx, time.Second)
			samples = append(samples, rssMB(pid))
		}
		wall := time.Since(start).Seconds()
		if t := e.testedSince(sctx, tested); t != nil {
			m.HeldTested, m.HeldProcessCores = t, round3(t.Process/wall)
		}
		m.Held = srvHeld(srv)
		m.OutsideHub = len(fleet) - m.Held
		m.HeldStatements = e.queries.snapshot().sub(q1).requestQueries()
		fb := srv.Service.FallbackStats()
		m.FallbackClaims, m.FallbackAnswered, m.FallbackShed = fb.Claims, fb.Answered, fb.Shed
		m.RedisPool = pool.stop()
		m.RedisErrors = metricValues(sctx, srv.URL, "jobapi_redis_errors_total")
		m.PeakRSSMB = round3(peakRSSMB(pid))
		if len(samples) > 0 {
			slices.Sort(samples)
			m.HeldRSSMB = round3(samples[len(samples)/2])
			m.HeldRSSMaxMB = round3(samples[len(samples)-1])
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mb := func(b uint64) float64 { return round3(float64(b) / (1 << 20)) }
		m.GoHeapMB, m.GoStackMB, m.GoSysMB, m.Goroutines = mb(ms.HeapInuse), mb(ms.StackInuse), mb(ms.Sys), runtime.NumGoroutine()
		m.GCCycles = ms.NumGC
		m.KBPerRunner = round3((m.HeldRSSMB - baseMB) * 1024 / float64(len(fleet)))
		for _, p := range []string{"heap", "goroutine"} {
			var b bytes.Buffer
			if err := pprof.Lookup(p).WriteTo(&b, 0); err == nil {
				if path := e.saveFile("memory."+p+".pprof", b.Bytes()); path != "" {
					e.logf("  memory: %s profile in %s", p, path)
				}
			}
		}
		if err := send("stop"); err != nil {
			return res, err
		}
		err := json.NewDecoder(out).Decode(&res)
		return res, err
	}()
	_ = stdin.Close()
	waitErr := cmd.Wait()
	if err := errors.Join(runErr, waitErr); err != nil {
		return nil, fmt.Errorf("fleet process: %w", err)
	}
	m.LoadEnd = loadAvg()
	m.Answers = res.Answers
	rec = newRecorder()
	r := e.result("memory", Resources{PeakRSSMB: m.PeakRSSMB, GoHeapMB: m.GoHeapMB, GoStackMB: m.GoStackMB, GoSysMB: m.GoSysMB,
		Goroutines: m.Goroutines, LoadAvg: m.LoadEnd, Tested: m.HeldTested}, rec)
	// Not a rate: the runners held, which every figure here is for.
	r.Unit = "runners"
	r.Count, r.Throughput = len(fleet), float64(len(fleet))
	r.Params = map[string]any{"runners": len(fleet), "pending_backlog": cfg.IdleBacklog, "long_poll_s": cfg.PickupLongPoll.Seconds(),
		"interval_s": cfg.PickupInterval.Seconds(), "duration_s": cfg.IdleDuration.Seconds()}
	r.Extra["memory"] = m
	r.Targets = append(r.Targets, Target{
		Name: fmt.Sprintf("peak RSS, %d pending and %d long-polling runners (bench process: jobapi's two replicas)", cfg.IdleBacklog, len(fleet)),
		Want: "≤ 300 MB", Got: m.PeakRSSMB, Unit: "MB", Met: m.PeakRSSMB > 0 && m.PeakRSSMB <= 300})
	e.logf("  memory: where the runners were held: hub %d, elsewhere %d (the fallback); fallback claims %d, answered %d, shed %d; "+
		"Redis pool: at most %d callers waiting for one of %d connections, %d pool timeouts; Redis errors %v; "+
		"request statements: warm-up %d, after %d",
		m.Held, m.OutsideHub, m.FallbackClaims, m.FallbackAnswered, m.FallbackShed, m.RedisPool.MaxWaiting, m.RedisPool.MaxConns,
		m.RedisPool.Timeouts, m.RedisErrors, m.WarmupStatements, m.HeldStatements)
	e.logf("  memory: %d runners (%d in the long poll's hub), %d pending (load %.1f → %.1f): RSS base %s, held %s (max %s), peak %s MB; "+
		"Go heap %s, stacks %s, sys %s MB, %d goroutines; %s KB per runner; jobapi %s cores; answers %v",
		len(fleet), m.Held, cfg.IdleBacklog, m.LoadStart, m.LoadEnd, fmtF(baseMB), fmtF(m.HeldRSSMB), fmtF(m.HeldRSSMaxMB),
		fmtF(m.PeakRSSMB), fmtF(m.GoHeapMB), fmtF(m.GoStackMB), fmtF(m.GoSysMB), m.Goroutines, fmtF(m.KBPerRunner),
		fmtF(m.HeldProcessCores), m.Answers)
	var problems []string
	for what, n := range res.Errors {
		problems = append(problems, fmt.Sprintf("%d fleet %s calls failed (last: %s)", n, what, res.LastErr[what]))
	}
	if len(res.Pickups) > 0 {
		problems = append(problems, fmt.Sprintf("%d runners got a job meant for other runners", len(res.Pickups)))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return r, errors.New(strings.Join(problems, "; "))
	}
	return r, nil
}

// memoryStats is the memory scenario's result.
type memoryStats struct {
	Runners   int     `json:"runners"`
	Backlog   int     `json:"pending_backlog"`
	LongPollS float64 `json:"long_poll_s"`
	WarmupS   float64 `json:"warmup_s"`
	// Held: requests the long poll held at the end (jobapi_long_poll_waiters); requests
	// whose queue version read failed are held by the fallback instead and not counted.
	Held int `json:"long_poll_waiters"`
	// OutsideHub: runners not in the hub at the end (every runner asks again at once, so
	// these are held by the fallback, or between two requests).
	OutsideHub int `json:"outside_hub"`
	// The replica's fallback counters (builds.FallbackStats) since it started.
	FallbackClaims   int64 `json:"fallback_claims"`
	FallbackAnswered int64 `json:"fallback_answered"`
	FallbackShed     int64 `json:"fallback_shed"`
	// RedisPool: the replica's go-redis pool from its start to the end of the held phase;
	// RedisErrors: its jobapi_redis_errors_total by kind.
	RedisPool   redisPoolPeak      `json:"redis_pool"`
	RedisErrors map[string]float64 `json:"redis_errors,omitempty"`
	// Statements run on behalf of requests: the warm-up (every runner's first poll), and
	// from then to the end of the held phase.
	WarmupStatements int64 `json:"warmup_statements"`
	HeldStatements   int64 `json:"held_statements"`
	// BaseRSSMB: the bench process before the replica started; PeakRSSMB: VmHWM from then
	// on (warm-up included); HeldRSSMB and HeldRSSMaxMB: the median and the largest of the
	// per-second RSS samples while the fleet was held; KBPerRunner: (held − base) ÷ runners.
	BaseRSSMB    float64 `json:"base_rss_mb"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	HeldRSSMB    float64 `json:"held_rss_mb"`
	HeldRSSMaxMB float64 `json:"held_rss_max_mb"`
	KBPerRunner  float64 `json:"kb_per_runner"`
	// The Go runtime at the end of the held phase (the whole bench process).
	GoHeapMB   float64 `json:"go_heap_inuse_mb"`
	GoStackMB  float64 `json:"go_stack_inuse_mb"`
	GoSysMB    float64 `json:"go_sys_mb"`
	Goroutines int     `json:"goroutines"`
	GCCycles   uint32  `json:"gc_cycles"`
	// HeldProcessCores: the bench process's CPU (jobapi) ÷ wall time while held.
	HeldProcessCores float64        `json:"held_process_cores"`
	HeldTested       *testedCPU     `json:"held_tested"`
	LoadStart        float64        `json:"load_avg_start"`
	LoadEnd          float64        `json:"load_avg_end"`
	Answers          map[string]int `json:"answers,omitempty"`
}

// rssMB is the process's resident set now (VmRSS).
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return round3(statusKB(string(b), "VmRSS:") / 1024)
}

// srvHeld reads how many requests the replica holds from its /metrics.
func srvHeld(srv *server.Server) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _ := metricValue(ctx, srv.URL, "jobapi_long_poll_waiters")
	return int(v)
}

// metricValue reads one unlabelled sample from a replica's /metrics.
func metricValue(ctx context.Context, baseURL, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s not in /metrics", name)
}

// redisPoolPeak is the most a replica's Redis pool was asked of while sampled: callers
// waiting for a connection (a burst of reads on a pool of 10 × GOMAXPROCS connections),
// the connections open, and the waits that ran into PoolTimeout (a wait that ends at its
// caller's deadline first is not counted by go-redis).
type redisPoolPeak struct {
	MaxWaiting uint32 `json:"max_waiting"`
	MaxConns   uint32 `json:"max_conns"`
	Timeouts   uint32 `json:"pool_timeouts"`
	Waits      uint32 `json:"waits"`
	WaitMs     int64  `json:"wait_ms"`

	done chan struct{}
	out  chan redisPoolPeak
}

// watchRedisPool samples srv's Redis pool every 20 ms until stop.
func watchRedisPool(srv *server.Server) *redisPoolPeak {
	w := &redisPoolPeak{done: make(chan struct{}), out: make(chan redisPoolPeak, 1)}
	go func() {
		var p redisPoolPeak
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			st := srv.Redis.PoolStats()
			p.MaxWaiting, p.MaxConns = max(p.MaxWaiting, st.PendingRequests), max(p.MaxConns, st.TotalConns)
			p.Timeouts, p.Waits, p.WaitMs = st.Timeouts, st.WaitCount, st.WaitDurationNs/1e6
			select {
			case <-w.done:
				w.out <- p
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *redisPoolPeak) stop() redisPoolPeak {
	close(w.done)
	return <-w.out
}

// metricValues reads every sample of a labelled metric from a replica's /metrics, keyed by
// its labels.
func metricValues(ctx context.Context, baseURL, name string) map[string]float64 {
	samples := metricSamples(ctx, baseURL)
	if samples == nil {
		return nil
	}
	out := map[string]float64{}
	for series, v := range samples {
		if labels, ok := strings.CutPrefix(series, name+"{"); ok {
			out[strings.TrimSuffix(labels, "}")] = v
		}
	}
	return out
}

// metricSamples reads a replica's /metrics: every sample keyed by its series (the name
// with its labels, as printed); nil when the replica does not answer.
func metricSamples(ctx context.Context, baseURL string) map[string]float64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		// Label values may hold spaces; the value follows the series' last space.
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if f, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = f
		}
	}
	return out
}
