package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/open-feature/go-sdk/openfeature"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"golang.org/x/sync/errgroup"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/featureflags"
	"github.com/jobapi/jobapi/featureflags/pgflags"
	"github.com/jobapi/jobapi/handlers"
	"github.com/jobapi/jobapi/migrations"
	"github.com/jobapi/jobapi/ratelimit"
	"github.com/jobapi/jobapi/reaper"
	"github.com/jobapi/jobapi/retry"
)

// buildSamplePeriod is how often the jobapi_builds gauge is refreshed.
const buildSamplePeriod = 15 * time.Second

// Server is one running replica.
type Server struct {
	// URL is the base URL the replica listens on (http://host:port).
	URL     string
	Service *builds.Service
	Sweeper *retry.Sweeper
	Reaper  *reaper.Reaper
	Stuck   *reaper.StuckStages
	Pool    *pgxpool.Pool
	Redis   redis.UniversalClient

	cancel context.CancelFunc
	group  *errgroup.Group
}

// Options tune a replica beyond Config; zero values are right for production.
type Options struct {
	// Now replaces the clock (tests).
	Now func() time.Time
	// FlagDomain names the OpenFeature domain; tests give each replica its own.
	FlagDomain string
	// Listener, when set, is used instead of listening on Config.ListenAddr.
	Listener net.Listener
	// DisableSweeper leaves the background sweeper off (tests drive SweepOnce).
	DisableSweeper bool
	// FlagProvider replaces the Postgres flag provider with any OpenFeature provider
	// (flagd, a file provider…). The Features API then answers 501: flags are managed there.
	FlagProvider openfeature.FeatureProvider
	// Tracer, when set, observes every query of the replica's Postgres pool (cmd/jobapi-bench
	// counts queries per request with it).
	Tracer pgx.QueryTracer
}

// NewRedis returns a cluster client for JOBAPI_REDIS_CLUSTER_ADDRS, else a single-node
// client for JOBAPI_REDIS_URL. Every call is bounded by short timeouts, and by its
// context's deadline too (ContextTimeoutEnabled: without it go-redis reads until
// ReadTimeout whatever the caller's deadline says).
func NewRedis(cfg Config) (redis.UniversalClient, error) {
	// Nor does it send what Redis before 7.2 answers with an error on every new connection
	// (CLIENT SETINFO, CLIENT MAINT_NOTIFICATIONS, the latter for managed Redis only): after
	// a restart those errors would drown the real ones in the error metric.
	noMaint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if len(cfg.RedisClusterAddrs) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisClusterAddrs,
			DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
			ContextTimeoutEnabled: true, DisableIdentity: true, MaintNotificationsConfig: noMaint}), nil
	}
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("JOBAPI_REDIS_URL: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, 500*time.Millisecond, 500*time.Millisecond
	opt.ContextTimeoutEnabled, opt.DisableIdentity, opt.MaintNotificationsConfig = true, true, noMaint
	return redis.NewClient(opt), nil
}

// Start connects, migrates (unless disabled), and serves until ctx ends or Close.
func Start(ctx context.Context, cfg Config, log *slog.Logger, opts Options) (*Server, error) {
	if cfg.AdminToken == "" {
		return nil, errors.New("JOBAPI_ADMIN_TOKEN: required (operators authenticate with it)")
	}
	if cfg.AutoMigrate {
		if err := migrations.Up(cfg.DatabaseURL); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("JOBAPI_DATABASE_URL: %w", err)
	}
	if cfg.DatabaseMaxConns > 0 {
		pcfg.MaxConns = cfg.DatabaseMaxConns
	}
	reg := prometheus.NewRegistry()
	pcfg.ConnConfig.Tracer = newPGErrors(reg, opts.Tracer)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	rdb, err := NewRedis(cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}

	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMetrics(reg)
	rdb.AddHook(redisstore.ErrorHook(m.redisError))

	domain := opts.FlagDomain
	if domain == "" {
		domain = "jobapi"
	}
	pgProvider := pgflags.New(pool, pgflags.Options{Refresh: cfg.FlagRefresh, Logger: log})
	var provider openfeature.FeatureProvider = pgProvider
	var featureAdmin handlers.Flags = featuresAPI{store: pgflags.NewStore(pool)}
	if opts.FlagProvider != nil {
		provider, featureAdmin = opts.FlagProvider, nil
	}
	if err := openfeature.SetNamedProviderAndWait(domain, provider); err != nil {
		// Not fatal: flags evaluate to their defaults (off) and count a fallback until the
		// provider loads, so the legacy flow keeps working.
		log.Warn("feature flag provider not ready; flags are off until it loads", "error", err)
	}
	flags := featureflags.New(openfeature.NewClient(domain), log)
	m.registerFlags(reg, flags)

	rs := redisstore.New(rdb, cfg.RedisKeyPrefix)
	store := pgstore.New(pool)
	svc := builds.NewService(builds.Deps{Store: store, Leases: rs, Queue: rs, Events: rs,
		TwoPhase: flags.TwoPhaseCommit, Observer: m, Audit: store, Now: opts.Now, Log: log,
		Config: builds.Config{AckTTL: cfg.AckTTL, MaxProvisioningWait: cfg.MaxProvisioningWait,
			TraceLimit: cfg.TraceLimit, LongPoll: cfg.LongPoll, Policy: builds.DefaultRetryPolicy(cfg.AutoRetryMax),
			MaxManagersPerRunner: cfg.MaxManagersPerRunner}})
	registerWaiters(reg, svc)

	sweeper := &retry.Sweeper{Store: store, Leases: rs, Queue: rs, Policy: builds.DefaultRetryPolicy(cfg.AutoRetryMax),
		Interval: cfg.SweepInterval, MaxWait: cfg.MaxProvisioningWait, Now: opts.Now, Log: log, OnSweep: m.sweep,
		Notify: svc.NotifyPipelines}
	reap := &reaper.Reaper{Store: store, Queue: rs, Interval: cfg.MaintenanceInterval, Now: opts.Now, Log: log,
		Notify: svc.NotifyPipelines, OnReap: m.reap,
		Params: builds.ReapParams{NoUpdates: cfg.NoUpdatesTimeout, ExecutionGrace: cfg.ExecutionGrace,
			Pending: cfg.PendingTimeout, Canceling: cfg.CancelingTimeout, Policy: builds.DefaultRetryPolicy(cfg.AutoRetryMax)}}
	stuck := &reaper.StuckStages{Store: store, Queue: rs, Timeout: cfg.StuckStageTimeout, Interval: cfg.MaintenanceInterval,
		Now: opts.Now, Log: log, Notify: svc.NotifyPipelines, OnCheck: m.stuck}

	rl := ratelimit.New(rdb, cfg.RedisKeyPrefix)
	rl.Log = log
	h := handlers.New(handlers.Deps{Service: svc, AdminToken: cfg.AdminToken, Logger: log,
		Flags: featureAdmin, Health: health{store: store, redis: rs},
		Registry: reg, TraceWatch: rs, Limiter: limiter{rl},
		Limits: handlers.RateLimits{JobsRequest: cfg.RateLimitJobsRequest, JobUpdates: cfg.RateLimitJobUpdates,
			JobTokenFailures: cfg.RateLimitJobTokenFailures, RunnerVerify: cfg.RateLimitRunnerVerify}})

	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			pool.Close()
			_ = rdb.Close()
			return nil, fmt.Errorf("JOBAPI_LISTEN_ADDR: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second, // slow-loris guard
		ReadTimeout:       5 * time.Minute,  // a 1 MiB trace patch on a slow link
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: long polls and waiters hold responses on purpose.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	if opts.FlagProvider == nil {
		g.Go(func() error { return pgProvider.Run(gctx) })
	}
	g.Go(func() error { return svc.RunPipelineEvents(gctx) })
	g.Go(func() error { return rl.Run(gctx) }) // sends the rate-limit counts decided locally
	g.Go(func() error { return sampleBuilds(gctx, reg, store, buildSamplePeriod, log) })
	if !opts.DisableSweeper {
		g.Go(func() error { return sweeper.Run(gctx) })
		g.Go(func() error { return reap.Run(gctx) })
		g.Go(func() error { return stuck.Run(gctx) })
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		// Let in-flight requests finish; held long polls end with their own timeout.
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		err := srv.Shutdown(sctx)
		// Rate-limit counts decided locally during the drain, sent before Redis closes.
		fctx, fcancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = rl.FlushOnce(fctx)
		fcancel()
		_ = openfeature.SetNamedProviderAndWait(domain, openfeature.NoopProvider{})
		pool.Close()
		_ = rdb.Close()
		return err
	})
	s := &Server{URL: "http://" + ln.Addr().String(), Service: svc, Sweeper: sweeper, Reaper: reap, Stuck: stuck,
		Pool: pool, Redis: rdb,
		cancel: cancel, group: g}
	log.Info("jobapi listening", "addr", ln.Addr().String())
	return s, nil
}

// Wait blocks until the replica stopped.
func (s *Server) Wait() error { return s.group.Wait() }

// Close stops the replica gracefully and waits for it.
func (s *Server) Close() error {
	s.cancel()
	return s.group.Wait()
}

type health struct {
	store *pgstore.Store
	redis *redisstore.Store
}

// Ready checks both backends: a replica without Redis can still serve, but slower and with
// early retries, so it should not take new traffic from a load balancer.
func (h health) Ready(r *http.Request) error {
	if err := h.store.Ping(r.Context()); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if err := h.redis.Ping(r.Context()); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// limiter adapts ratelimit.Limiter to the handlers' interface.
type limiter struct{ l *ratelimit.Limiter }

func (l limiter) Allow(ctx context.Context, scope, key string, requests int, window time.Duration) (handlers.RateDecision, error) {
	d, err := l.l.Allow(ctx, scope, key, ratelimit.Limit{Requests: requests, Window: window})
	return handlers.RateDecision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset}, err
}
