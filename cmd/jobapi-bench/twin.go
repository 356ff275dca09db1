package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/server"
)

// The store-only twins of cycle and ack run the same work through jobapi's service alone:
// the builds.Service methods the runner endpoints call, over pgstore, at the same
// concurrency and pool size, without HTTP, JSON or Redis. Next to the full numbers they
// split the gap to the baseline between the database work a job needs and what the HTTP
// layer and Redis add around it.

// storeOnly is what a twin measured.
type storeOnly struct {
	PerSecond float64 `json:"per_s"`
	Count     int     `json:"count"`
	Ratio     float64 `json:"ratio_to_baseline,omitempty"`
	// Statements is what one unit (job or ack) ran, BEGIN and COMMIT included.
	Statements float64 `json:"statements_per_unit"`
}

// storePool is a pool like jobapi's (--db-max-conns) whose statements are counted.
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

// result is n units done in took.
func (t *twin) result(n int, took time.Duration, baseline float64) storeOnly {
	s := storeOnly{Count: n, PerSecond: round3(float64(n) / took.Seconds())}
	if baseline > 0 {
		s.Ratio = round3(s.PerSecond / baseline)
	}
	if n > 0 {
		s.Statements = round3(float64(t.statements.n.Load()) / float64(n))
	}
	return s
}

// withStoreOnly runs a ratio scenario's twin, when --store-only is
// on, and adds its result and its latencies to r.
func (e *env) withStoreOnly(r *Result, rec *recorder, what string, run func() (storeOnly, error)) error {
	if !e.cfg.StoreOnly {
		return nil
	}
	e.logf("  the same %s through the service and store alone", what)
	so, err := run()
	if err != nil {
		return err
	}
	r.Extra["store_only"] = so
	r.Endpoints = rec.summary()
	r.Errors = rec.totalErrors()
	return nil
}

// twin is a builds.Service of the bench's own over pgstore, on a pool of its own whose
// statements it counts. The twins call its methods, the ones jobapi's handlers call, so that
// they run the service's own sequence of store calls and nothing else: no HTTP, no JSON, and
// no Redis (noRedis).
type twin struct {
	svc        *builds.Service
	pool       *pgxpool.Pool
	statements *stmtCounter
}

func (e *env) newTwin(ctx context.Context) (*twin, error) {
	pool, counter, err := e.storePool(ctx)
	if err != nil {
		return nil, err
	}
	// The replica's own wiring (server.ServiceDeps) without Redis: the stand-ins below for
	// ack keys and the queue version, and builds.Standalone for the feeds (queue feed,
	// events, live logs, change feed), which the service then does without as a replica
	// whose Redis never answers would. Metrics are the bench's own.
	deps := server.ServiceDeps(e.serverCfg, pgstore.New(pool))
	deps.Leases, deps.Queue, deps.TwoPhase, deps.Observer = noRedis{}, noRedis{}, allTwoPhase{}, builds.Unobserved
	deps.QueueFeed, deps.Events, deps.Changes, deps.Live = builds.Standalone, builds.Standalone, builds.Standalone, builds.Standalone
	return &twin{svc: builds.NewService(deps), pool: pool, statements: counter}, nil
}

func (t *twin) close() { t.pool.Close() }

// allTwoPhase is two-phase for every build, decided before the claim, as the bench's flag
// setting (on for everyone: reason STATIC) makes it for the HTTP runs.
type allTwoPhase struct{}

func (allTwoPhase) TwoPhaseCommit(context.Context, int64, int64, string) bool { return true }
func (allTwoPhase) TwoPhaseCommitAnyProject(context.Context, int64, string) (bool, bool) {
	return true, true
}
func (allTwoPhase) CountTwoPhaseCommit(bool) {}

// noRedis stands in for Redis in the twin: ack keys and the queue version are Redis's part of
// a job, which the twin leaves out on purpose. With no queue version every job request goes
// to Postgres, as a busy runner's does anyway.
type noRedis struct{}

func (noRedis) Grant(context.Context, int64, string, time.Duration) error   { return nil }
func (noRedis) Refresh(context.Context, int64, string, time.Duration) error { return nil }
func (noRedis) Release(context.Context, int64) error                        { return nil }
func (noRedis) TTLs(context.Context, []int64) (map[int64]time.Duration, error) {
	return map[int64]time.Duration{}, nil
}
func (noRedis) Version(context.Context) (string, error) { return "", nil }
func (noRedis) Bump(context.Context) error              { return nil }

var (
	_ builds.Leases = noRedis{}
	_ builds.Queue  = noRedis{}
)
