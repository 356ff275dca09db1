package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/builds/pgstore"
)

// pgErrors counts failed Postgres queries by kind, as a pgx tracer so that every query of
// the pool is seen without touching the store's code.
type pgErrors struct {
	next    pgx.QueryTracer // another tracer to call too (cmd/jobapi-bench counts queries)
	counter *prometheus.CounterVec
}

func newPGErrors(reg *prometheus.Registry, next pgx.QueryTracer) *pgErrors {
	t := &pgErrors{next: next, counter: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_postgres_errors_total",
		Help: "Failed Postgres queries by kind (connection, deadlock, serialization, constraint, canceled, timeout, other).",
	}, []string{"kind"})}
	reg.MustRegister(t.counter)
	return t
}

func (t *pgErrors) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if t.next != nil {
		return t.next.TraceQueryStart(ctx, c, d)
	}
	return ctx
}

func (t *pgErrors) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	if t.next != nil {
		t.next.TraceQueryEnd(ctx, c, d)
	}
	if d.Err != nil && !errors.Is(d.Err, pgx.ErrNoRows) {
		t.counter.WithLabelValues(pgErrorKind(d.Err)).Inc()
	}
}

// The store pipelines a few statements as a pgx.Batch (a lock and the read that follows it):
// pgx traces those through BatchTracer only, so they are counted, and passed on, here.

func (t *pgErrors) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if next, ok := t.next.(pgx.BatchTracer); ok {
		return next.TraceBatchStart(ctx, c, d)
	}
	return ctx
}

func (t *pgErrors) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	if next, ok := t.next.(pgx.BatchTracer); ok {
		next.TraceBatchQuery(ctx, c, d)
	}
	if d.Err != nil && !errors.Is(d.Err, pgx.ErrNoRows) {
		t.counter.WithLabelValues(pgErrorKind(d.Err)).Inc()
	}
}

func (t *pgErrors) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	if next, ok := t.next.(pgx.BatchTracer); ok {
		next.TraceBatchEnd(ctx, c, d)
	}
}

func pgErrorKind(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "40P01":
			return "deadlock"
		case pgErr.Code == "40001":
			return "serialization"
		case pgErr.Code[:2] == "23":
			return "constraint"
		case pgErr.Code[:2] == "08", pgErr.Code[:3] == "57P":
			return "connection"
		}
		return "other"
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return "connection"
	}
	return "other"
}

// sampleBuilds keeps a gauge of unfinished builds by state, read every period (never per
// scrape: a scrape must not cost a query).
func sampleBuilds(ctx context.Context, reg *prometheus.Registry, store *pgstore.Store, period time.Duration, log *slog.Logger) error {
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "jobapi_builds", Help: "Unfinished builds by state, sampled from Postgres.",
	}, []string{"state"})
	reg.MustRegister(gauge)
	states := []builds.Status{builds.StatusCreated, builds.StatusManual, builds.StatusScheduled, builds.StatusPending,
		builds.StatusWaiting, builds.StatusRunning, builds.StatusCanceling}
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		counts, err := store.ActiveCounts(qctx)
		cancel()
		if err == nil {
			for _, st := range states {
				gauge.WithLabelValues(string(st)).Set(float64(counts[st]))
			}
		} else if ctx.Err() == nil {
			log.WarnContext(ctx, "build counts not sampled", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
	}
}

// sampleTraceBacklog keeps gauges of the logs waiting to be archived and the age of the
// oldest, read every period: a backlog that grows says the object store is failing.
func sampleTraceBacklog(ctx context.Context, reg *prometheus.Registry, logs *joblogs.Service, period time.Duration, log *slog.Logger) error {
	backlog := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "jobapi_trace_archive_backlog", Help: "Finished builds whose logs are not archived yet (or whose live log is not dropped yet), sampled from Postgres.",
	})
	oldest := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "jobapi_trace_archive_oldest_seconds", Help: "Age of the oldest finished build whose log is not archived yet.",
	})
	reg.MustRegister(backlog, oldest)
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, age, err := logs.TraceArchiveBacklog(qctx)
		cancel()
		if err == nil {
			backlog.Set(float64(n))
			oldest.Set(age.Seconds())
		} else if ctx.Err() == nil {
			log.WarnContext(ctx, "trace archive backlog not sampled", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
	}
}

// registerWaiters exposes how many requests this replica holds open.
func registerWaiters(reg *prometheus.Registry, svc *builds.Service) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "jobapi_long_poll_waiters",
			Help: "Idle job requests held by this replica (JOBAPI_LONG_POLL)."},
			func() float64 { return float64(svc.LongPollWaiters()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "jobapi_pipeline_waiters",
			Help: "Pipeline wait requests held by this replica."},
			func() float64 { return float64(svc.PipelineWaiters()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jobapi_fallback_claims_total",
			Help: "Claims of job requests that could not read the queue version (Redis slow or down), paced per runner profile."},
			func() float64 { return float64(svc.FallbackStats().Claims) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jobapi_fallback_answered_total",
			Help: "Job requests that could not read the queue version answered 204 by a claim another request of their profile ran."},
			func() float64 { return float64(svc.FallbackStats().Answered) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jobapi_shed_requests_total",
			Help: "Job requests shed with 503 and Retry-After because no fallback claim answered them in time."},
			func() float64 { return float64(svc.FallbackStats().Shed) }),
	)
}
