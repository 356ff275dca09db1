package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/runnerclient"
)

// loadgen runs fn in n goroutines labelled as the load generator and waits for them.
func loadgen(ctx context.Context, n int, fn func(ctx context.Context, i int)) {
	var wg sync.WaitGroup
	pprof.Do(ctx, pprof.Labels(labelKey, "loadgen"), func(ctx context.Context) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(ctx, i)
			}()
		}
	})
	wg.Wait()
}

// maxErrors stops a scenario whose calls keep failing: the numbers would mean nothing.
const maxErrors = 50

// queriesPer fills QueriesPerRequest: endpoint name in the table → call name and status
// (0: any).
func queriesPer(r *Result, q queryCounts, rows map[string]callKey) {
	r.QueriesPerRequest = map[string]float64{}
	for row, k := range rows {
		var statuses []int
		if k.status != 0 {
			statuses = []int{k.status}
		}
		if v, ok := q.per(k.endpoint, statuses...); ok {
			r.QueriesPerRequest[row] = v
		}
	}
}

func (e *env) result(name string, res Resources, rec *recorder) *Result {
	r := &Result{Scenario: name, Resources: res, Endpoints: rec.summary(), Errors: rec.totalErrors(),
		BackgroundQueries: res.queries.other, Params: map[string]any{}, Extra: map[string]any{}}
	if e.queries == nil {
		r.BackgroundQueries = -1
	}
	return r
}

// walPer records the WAL written per unit of work (bytes, and full-page images).
func walPer(r *Result, unit string, n int) {
	if r.WAL == nil || n <= 0 {
		return
	}
	r.Extra["wal_bytes_per_"+unit] = round3(r.WAL.MB * (1 << 20) / float64(n))
	r.Extra["wal_fpi_per_"+unit] = round3(float64(r.WAL.FPI) / float64(n))
}

// costPer adds what one unit of work cost: WAL, jobapi's CPU, and the whole machine's.
func costPer(r *Result, res Resources, unit string, n int) {
	walPer(r, unit, n)
	if n <= 0 {
		return
	}
	if res.ServerCPU > 0 {
		r.Extra["server_cpu_us_per_"+unit] = round3(res.ServerCPU / float64(n) * 1e6)
	}
	if per := res.Machine.perUnit(res, n); per != nil {
		r.Extra["machine_cpu_us_per_"+unit] = per
	}
}

// withStoreOnly runs a ratio scenario's twin through the store alone, when --store-only is
// on, and adds its result and its latencies to r.
func (e *env) withStoreOnly(r *Result, rec *recorder, what string, run func() (storeOnly, error)) error {
	if !e.cfg.StoreOnly {
		return nil
	}
	e.logf("  the same %s through the store alone", what)
	so, err := run()
	if err != nil {
		return err
	}
	r.Extra["store_only"] = so
	r.Endpoints = rec.summary()
	r.Errors = rec.totalErrors()
	return nil
}

func (e *env) ratio(r *Result, baseline float64) {
	if baseline > 0 {
		r.RatioToBaseline = round3(r.Throughput / baseline)
	}
}

// baseline measures the database's own ceiling for the writes jobapi makes: concurrent
// single-row primary-key UPDATEs, each its own transaction, on as many connections as
// jobapi's pool; and Redis SET/GET round trips.
func (e *env) baseline(ctx context.Context) (*Result, error) {
	cfg := e.cfg
	rec := newRecorder()
	w := e.startWindow("baseline", true)
	// The UPDATEs' own share of the machine, for comparison with a job's or an ack's.
	machine := snapshotMachine()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	updates, pgWall, err := e.pgUpdates(ctx, cfg.BaselineDuration, rec, "pg_update")
	if err != nil {
		return nil, err
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	updateCPU := machineSince(machine, cpuSeconds(ru1)-cpuSeconds(ru0))

	var roundTrips atomic.Int64
	start := time.Now()
	deadline := start.Add(cfg.BaselineDuration / 2)
	loadgen(ctx, cfg.BaselineConns, func(ctx context.Context, i int) {
		key := fmt.Sprintf("%sbaseline:%d", e.benchKeys, i)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			t := time.Now()
			if err := e.rdb.Set(ctx, key, t.UnixNano(), time.Minute).Err(); err != nil {
				rec.fail("redis_set", err)
				return
			}
			t2 := time.Now()
			rec.add("redis_set", t2.Sub(t))
			if err := e.rdb.Get(ctx, key).Err(); err != nil {
				rec.fail("redis_get", err)
				return
			}
			rec.add("redis_get", time.Since(t2))
			roundTrips.Add(2)
		}
	})
	redisWall := time.Since(start)
	res := w.stop()

	r := e.result("baseline", res, rec)
	r.Unit = "updates/s"
	r.Count = updates
	r.Throughput = round3(float64(updates) / pgWall.Seconds())
	r.RatioToBaseline = 1
	r.Extra["redis_round_trips_per_s"] = round3(float64(roundTrips.Load()) / redisWall.Seconds())
	walPer(r, "update", updates)
	if per := updateCPU.perUnit(Resources{}, updates); per != nil {
		r.Extra["machine_cpu_us_per_update"] = per
	}
	r.Params = map[string]any{"connections": cfg.BaselineConns, "duration_s": cfg.BaselineDuration.Seconds(),
		"table_rows": baselineRows, "redis_connections": cfg.BaselineConns}
	var commit string
	_ = e.db.QueryRow(ctx, `SELECT current_setting('synchronous_commit') || ', fsync ' || current_setting('fsync')`).Scan(&commit)
	r.Extra["synchronous_commit"] = commit
	return r, nil
}

const baselineRows = 10_000

// pgUpdates runs concurrent single-row primary-key UPDATEs, each its own transaction, on
// --baseline-conns connections for d: the database's ceiling for one state change.
func (e *env) pgUpdates(ctx context.Context, d time.Duration, rec *recorder, endpoint string) (int, time.Duration, error) {
	conns := e.cfg.BaselineConns
	if _, err := e.db.Exec(ctx, `
CREATE TABLE IF NOT EXISTS jobapi_bench_baseline (
    id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, 0, err
	}
	if _, err := e.db.Exec(ctx, `INSERT INTO jobapi_bench_baseline (id) SELECT g FROM generate_series(1, $1::int) g
ON CONFLICT DO NOTHING`, baselineRows); err != nil {
		return 0, 0, err
	}
	if _, err := e.db.Exec(ctx, `VACUUM (ANALYZE) jobapi_bench_baseline`); err != nil {
		return 0, 0, err
	}
	pcfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return 0, 0, err
	}
	pcfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	const update = `UPDATE jobapi_bench_baseline SET n = n + 1, updated_at = now() WHERE id = $1`
	// Open and prepare every connection before the clock starts.
	loadgen(ctx, conns, func(ctx context.Context, i int) {
		_, _ = pool.Exec(ctx, update, i+1)
	})
	var updates atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	loadgen(ctx, conns, func(ctx context.Context, i int) {
		rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
		for time.Now().Before(deadline) && ctx.Err() == nil {
			t := time.Now()
			if _, err := pool.Exec(ctx, update, rng.Int64N(baselineRows)+1); err != nil {
				rec.fail(endpoint, err)
				if rec.totalErrors() > maxErrors {
					return
				}
				continue
			}
			rec.add(endpoint, time.Since(t))
			updates.Add(1)
		}
	})
	return int(updates.Load()), time.Since(start), nil
}

// adjacentBaseline re-measures the UPDATE ceiling right before a ratio scenario: on a
// machine whose other load drifts, the ratio then compares like with like.
func (e *env) adjacentBaseline(ctx context.Context) float64 {
	if e.cfg.AdjacentBaseline <= 0 {
		return 0
	}
	n, took, err := e.pgUpdates(ctx, e.cfg.AdjacentBaseline, newRecorder(), "pg_update")
	if err != nil || n == 0 {
		e.logf("adjacent baseline: %v", err)
		return 0
	}
	return round3(float64(n) / took.Seconds())
}

// refBaseline is the baseline a ratio target compares with: the adjacent one if measured.
func refBaseline(baseline, adjacent float64) float64 {
	if adjacent > 0 {
		return adjacent
	}
	return baseline
}

// ratioTarget sets the ratios to the run's baseline and to the adjacent one, and the target
// on the adjacent one when there is one.
func (e *env) ratioTarget(r *Result, baseline, adjacent, want float64, name string) {
	e.ratio(r, baseline)
	if baseline <= 0 && adjacent <= 0 {
		return // no baseline in this run: nothing to compare with
	}
	got := r.RatioToBaseline
	if adjacent > 0 {
		got = round3(r.Throughput / adjacent)
		r.Extra["adjacent_baseline_updates_per_s"] = adjacent
		r.Extra["ratio_to_adjacent_baseline"] = got
		name += " (adjacent baseline)"
	}
	r.Targets = append(r.Targets, Target{Name: name, Want: fmt.Sprintf("≥ %g", want), Got: got, Met: got >= want})
}

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

func callErr(err error, code int) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("HTTP %d", code)
}

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

// rssPID is the process whose memory is jobapi's (0: unknown, a remote jobapi).
func (e *env) rssPID() int {
	switch {
	case e.serverPID > 0:
		return e.serverPID
	case e.srv != nil:
		return osGetpid()
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

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

// storeOnly is the Postgres part of a scenario alone: the same statements, through jobapi's
// own store (pgstore), at the same concurrency and pool size, without HTTP, JSON or Redis.
// Next to the full numbers it splits the gap to the baseline between the database work a
// job needs and what the service adds around it.
type storeOnly struct {
	PerSecond float64 `json:"per_s"`
	Count     int     `json:"count"`
	Ratio     float64 `json:"ratio_to_baseline,omitempty"`
	// Statements is what one unit (job or ack) ran, BEGIN and COMMIT included.
	Statements float64 `json:"statements_per_unit"`
}

func (e *env) storePool(ctx context.Context) (*pgxpool.Pool, *stmtCounter, error) {
	pcfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, nil, err
	}
	pcfg.MaxConns = int32(e.cfg.DBMaxConns)
	counter := &stmtCounter{}
	pcfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	return pool, counter, err
}

// stmtCounter counts statements.
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *stmtCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// ackStoreOnly: per ack, what the service asks of the store (the build by id for the token
// check, then the compare-and-set with its event).
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
	pool, counter, err := e.storePool(ctx)
	if err != nil {
		return storeOnly{}, err
	}
	defer pool.Close()
	store := pgstore.New(pool)
	var next atomic.Int64
	start := time.Now()
	loadgen(ctx, e.cfg.Runners, func(ctx context.Context, i int) {
		for ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			k := int(next.Add(1)) - 1
			if k >= len(jobs) {
				return
			}
			t := time.Now()
			_, err := store.Acknowledge(ctx, jobs[k].ID, builds.HashToken(jobs[k].Token), time.Now())
			if err != nil {
				rec.fail("ack_store_only", err)
				continue
			}
			rec.add("ack_store_only", time.Since(t))
		}
	})
	return e.storeOnlyResult(rec.count("ack_store_only"), time.Since(start), counter, baseline), nil
}

// cycleStoreOnly: per job, what the service asks of the store on its usual path: the claim
// (two-phase), then the ack, the trace patch and the final update, each one change that
// carries the job token (the service reads the build only when one of them misses).
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
	pool, counter, err := e.storePool(ctx)
	if err != nil {
		return storeOnly{}, err
	}
	defer pool.Close()
	store := pgstore.New(pool)
	policy := builds.DefaultRetryPolicy(2)
	var done atomic.Int64
	start := time.Now()
	loadgen(ctx, e.cfg.Runners, func(ctx context.Context, i int) {
		r := rs[i%len(rs)]
		for ctx.Err() == nil && rec.totalErrors() <= maxErrors {
			t := time.Now()
			now := time.Now()
			tokenHash := builds.HashToken(builds.NewToken(builds.JobTokenPrefix))
			b, err := store.Claim(ctx, builds.Claim{Runner: builds.Runner{ID: r.ID, Tags: []string{}, RunUntagged: true},
				ManagerID: r.ManagerID, SystemID: r.SystemID, TokenHash: tokenHash,
				Now: now, TwoPhase: func(int64) bool { return true }, AckDeadline: now.Add(2 * time.Minute)})
			if errors.Is(err, builds.ErrNoBuild) {
				return
			}
			step := func(f func() error) {
				if err == nil {
					err = f()
				}
			}
			step(func() error {
				_, err := store.Acknowledge(ctx, b.ID, tokenHash, time.Now())
				return err
			})
			step(func() error { _, _, err := store.AppendTrace(ctx, b.ID, 0, traceData, time.Now()); return err })
			step(func() error {
				_, err := store.Finish(ctx, builds.Finish{BuildID: b.ID, From: []builds.Status{builds.StatusRunning},
					To: builds.StatusSuccess, RunnerFinalState: builds.StateSuccess, Event: builds.EventFinished,
					TokenHash: tokenHash, Now: time.Now(), Policy: &policy})
				return err
			})
			if err != nil {
				rec.fail("cycle_store_only", err)
				continue
			}
			rec.add("cycle_store_only", time.Since(t))
			done.Add(1)
		}
	})
	return e.storeOnlyResult(int(done.Load()), time.Since(start), counter, baseline), nil
}

func (e *env) storeOnlyResult(n int, took time.Duration, counter *stmtCounter, baseline float64) storeOnly {
	s := storeOnly{Count: n, PerSecond: round3(float64(n) / took.Seconds())}
	if baseline > 0 {
		s.Ratio = round3(s.PerSecond / baseline)
	}
	if n > 0 {
		s.Statements = round3(float64(counter.n.Load()) / float64(n))
	}
	return s
}
