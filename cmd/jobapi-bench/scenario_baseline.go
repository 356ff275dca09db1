package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

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
	updates, pgWall, err := e.pgUpdates(ctx, cfg.BaselineDuration, rec, "pg_update", nil)
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
// measure, when set, is called as the clock starts; what it returns is called as the load
// ends, with the pool still open (its backends' CPU is read then).
func (e *env) pgUpdates(ctx context.Context, d time.Duration, rec *recorder, endpoint string, measure func() func()) (int, time.Duration, error) {
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
	stop := func() {}
	if measure != nil {
		stop = measure()
	}
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
	took := time.Since(start)
	stop()
	return int(updates.Load()), took, nil
}

// adjacentBaseline re-measures the UPDATE ceiling right before a ratio scenario: on a
// machine whose other load drifts, the ratio then compares like with like.
func (e *env) adjacentBaseline(ctx context.Context) float64 {
	if e.cfg.AdjacentBaseline <= 0 {
		return 0
	}
	n, took, err := e.pgUpdates(ctx, e.cfg.AdjacentBaseline, newRecorder(), "pg_update", nil)
	if err != nil || n == 0 {
		e.logf("adjacent baseline: %v", err)
		return 0
	}
	return round3(float64(n) / took.Seconds())
}
