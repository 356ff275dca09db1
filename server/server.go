package server

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"github.com/jobapi/jobapi/oidclogin"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
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
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/auditlog"
	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/builds/hooks"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/builds/listings"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/builds/pushes"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/builds/resourcegroups"
	"github.com/jobapi/jobapi/builds/runners"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/builds/tokenguard"
	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/cipipeline"
	"github.com/jobapi/jobapi/cisource"
	"github.com/jobapi/jobapi/downstream"
	"github.com/jobapi/jobapi/featureflags"
	"github.com/jobapi/jobapi/featureflags/pgflags"
	"github.com/jobapi/jobapi/handlers"
	"github.com/jobapi/jobapi/httppark"
	"github.com/jobapi/jobapi/idtoken"
	"github.com/jobapi/jobapi/migrations"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/ratelimit"
	"github.com/jobapi/jobapi/reaper"
	"github.com/jobapi/jobapi/retry"
	"github.com/jobapi/jobapi/webui"
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
	Due     *reaper.DueJobs // queues delayed jobs whose time has come
	// Artifacts is the artifacts pass (expiry and object cleanup); tests call PassOnce.
	Artifacts *reaper.Artifacts
	// Bridges is the bridge pass (child pipelines of trigger: jobs); tests call CreateOnce.
	Bridges *downstream.Bridges
	// Failures cancels pipelines that on_job_failure: all left running; tests call Once.
	Failures *reaper.FailureCancels
	// Objects is the object store of job artifacts.
	Objects builds.ObjectStore
	// Traces archives finished builds' logs (its requests always run; its pass only with
	// the sweeper); tests call PassOnce.
	Traces *reaper.TraceArchiver
	// Schedules starts the pipelines of due schedules (with the sweeper); tests call TickOnce.
	Schedules *schedules.Worker
	Pool      *pgxpool.Pool
	Redis     redis.UniversalClient
	// Hub fans change hints out to the web UI's live pages.
	Hub *webui.Hub
	// Logs archives and reads job logs.
	Logs *joblogs.Service
	// Projects keeps projects, their variables, protected refs and environments.
	Projects *projects.Service
	// Pushes receives forges' webhooks and polls remotes; tests call PollOnce and PollProject.
	Pushes *pushes.Service
	// Hooks finds webhook and commit status events and sends them; tests call its passes.
	Hooks *hooks.Worker

	cancel context.CancelFunc
	group  *errgroup.Group
	// includes is removed once every goroutine that reads through it has stopped.
	includes  *cisource.GitCache
	closeOnce sync.Once
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
	// RateLimitCallTimeout bounds the rate limiter's Redis round trip (0:
	// ratelimit.DefaultCallTimeout); past it a request is let through. Tests that count
	// refusals on a loaded machine raise it.
	RateLimitCallTimeout time.Duration
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

// Start connects, migrates (unless disabled), and serves until ctx ends or Close. It reads
// top to bottom: settings, backends, flags, the service and its workers, HTTP, then the
// goroutines that run them all.
func Start(ctx context.Context, cfg Config, log *slog.Logger, opts Options) (*Server, error) {
	if err := prepare(cfg); err != nil {
		return nil, err
	}
	keyFile, err := readIDTokenKeys(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	be, m, err := connect(ctx, cfg, opts, reg)
	if err != nil {
		return nil, err
	}
	// Not fatal: the object store matters to artifact calls only, which answer 503 until it
	// does; readiness leaves it out for the same reason.
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := be.objects.Ping(pctx); err != nil {
		log.Warn("object store not answering: artifact uploads and downloads answer 503 until it does", "error", err)
	}
	pcancel()
	fl := startFlags(cfg, opts, be.pool, log)
	m.registerFlags(reg, fl.flags)
	d := newDomain(cfg, opts, be, fl, m, log)
	registerWaiters(reg, d.svc)
	rl := ratelimit.New(be.rdb, cfg.RedisKeyPrefix)
	rl.Log, rl.Now, rl.CallTimeout = log, opts.Now, opts.RateLimitCallTimeout
	hub := webui.NewHub(d.svc.SubscribeChanges, log)
	idTokens := idTokenKeyring(keyFile, d.store)
	srv, ln, err := newHTTP(cfg, opts, &d, fl, reg, rl, hub, idTokens, log)
	if err != nil {
		be.close()
		return nil, err
	}
	d.starts.worker.OnTick = m.scheduleTick
	d.setHookBaseURL(cfg.ExternalURL, "http://"+ln.Addr().String())
	workers := []func(context.Context) error{
		d.svc.RunPipelineEvents,
		d.hookWorker.Run,    // webhooks and commit statuses: every replica finds and sends them
		d.svc.RunChangeFeed, // hints for live web pages, batched
		d.svc.RunQueueFeed,  // queue bumps, which wake held long polls
		hub.Run,             // the web UI's one subscription to them
		rl.Run,              // sends the rate-limit counts decided locally
		func(ctx context.Context) error { return sampleBuilds(ctx, reg, d.store, buildSamplePeriod, log) },
	}
	if opts.DisableSweeper {
		// Logs this replica's builds finish with are archived all the same.
		workers = append(workers, d.traces.ServeRequests)
	} else {
		workers = append(workers, d.traces.Run, func(ctx context.Context) error {
			return sampleTraceBacklog(ctx, reg, d.logs, buildSamplePeriod, log)
		})
	}
	if fl.pg != nil {
		workers = append(workers, fl.pg.Run)
	}
	if !opts.DisableSweeper {
		workers = append(workers, func(ctx context.Context) error { return d.pushes.Run(ctx, pollTick) })
		workers = append(workers, d.sweeper.Run, d.reaper.Run, d.stuck.Run, d.due.Run, d.staleManagers.Run, d.artifacts.Run,
			d.bridges.Run, d.failures.Run, d.starts.worker.Run)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Service: d.svc, Sweeper: d.sweeper, Reaper: d.reaper,
		Stuck: d.stuck, Due: d.due, Artifacts: d.artifacts, Bridges: d.bridges, Failures: d.failures, Objects: be.objects, Traces: d.traces, Schedules: d.starts.worker, Pool: be.pool, Redis: be.rdb, Hub: hub,
		Logs: d.logs, Projects: d.prj, Pushes: d.pushes, Hooks: d.hookWorker, includes: d.includes}
	s.run(ctx, srv, ln, workers, func() {
		// Rate-limit counts decided locally during the drain, sent before Redis closes.
		fctx, fcancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = rl.FlushOnce(fctx)
		fcancel()
		_ = openfeature.SetNamedProviderAndWait(fl.domain, openfeature.NoopProvider{})
		be.close()
	})
	log.Info("jobapi listening", "addr", ln.Addr().String())
	return s, nil
}

// prepare checks what Start cannot do without and brings the schema up to date.
func prepare(cfg Config) error {
	if cfg.AdminToken == "" {
		return errors.New("JOBAPI_ADMIN_TOKEN: required (operators authenticate with it)")
	}
	if n := len(cfg.AdminToken); n < tokenguard.MinAdminTokenLength {
		return fmt.Errorf("JOBAPI_ADMIN_TOKEN: at least %d characters, got %d (it is the bootstrap credential: use a long random one, e.g. openssl rand -hex 24)",
			tokenguard.MinAdminTokenLength, n)
	}
	if n := len(cfg.RunnerRegistrationToken); n > 0 && n < tokenguard.MinAdminTokenLength {
		return fmt.Errorf("JOBAPI_RUNNER_REGISTRATION_TOKEN: at least %d characters when set, got %d (unset it to turn registration tokens off)",
			tokenguard.MinAdminTokenLength, n)
	}
	if cfg.AutoMigrate {
		if err := migrations.Up(cfg.DatabaseURL); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

// readIDTokenKeys reads JOBAPI_ID_TOKEN_SIGNING_KEY's file at start, so that a missing or
// malformed one stops the replica instead of failing its first job (nil: none is set).
func readIDTokenKeys(cfg Config) ([]*rsa.PrivateKey, error) {
	if cfg.IDTokenSigningKey == "" {
		return nil, nil
	}
	text, err := os.ReadFile(cfg.IDTokenSigningKey)
	if err != nil {
		return nil, fmt.Errorf("JOBAPI_ID_TOKEN_SIGNING_KEY: %w", err)
	}
	keys, err := idtoken.ParsePEM(text)
	if err == nil {
		_, err = idtoken.New(keys) // its keys must be usable too (size)
	}
	if err != nil {
		return nil, fmt.Errorf("JOBAPI_ID_TOKEN_SIGNING_KEY %s: %w", cfg.IDTokenSigningKey, err)
	}
	return keys, nil
}

// idTokenKeyring signs with the key file's keys when there is one, else with the keys in
// Postgres, generating the first one there (pgstore makes that race-free across replicas).
func idTokenKeyring(keyFile []*rsa.PrivateKey, store *pgstore.Store) *idtoken.Keyring {
	return idtoken.NewKeyring(func(ctx context.Context) ([]*rsa.PrivateKey, error) {
		if keyFile != nil {
			return keyFile, nil
		}
		stored, err := store.IDTokenSigningKeys(ctx, idtoken.GenerateKey)
		if err != nil {
			return nil, err
		}
		return idtoken.ParsePEM([]byte(strings.Join(stored, "")))
	})
}

// backends are the replica's connections: Postgres, Redis and the object store.
type backends struct {
	pool    *pgxpool.Pool
	rdb     redis.UniversalClient
	objects builds.ObjectStore
}

func (b backends) close() {
	b.pool.Close()
	_ = b.rdb.Close()
}

// connect opens the Postgres pool and the Redis client, and the metrics that count their
// errors (registered in reg with the process metrics).
func connect(ctx context.Context, cfg Config, opts Options, reg *prometheus.Registry) (backends, *metrics, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return backends{}, nil, fmt.Errorf("JOBAPI_DATABASE_URL: %w", err)
	}
	if cfg.DatabaseMaxConns > 0 {
		pcfg.MaxConns = cfg.DatabaseMaxConns
	}
	pcfg.ConnConfig.Tracer = newPGErrors(reg, opts.Tracer)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return backends{}, nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	rdb, err := NewRedis(cfg)
	if err != nil {
		pool.Close()
		return backends{}, nil, err
	}
	objects, err := objectstore.Open(ctx, cfg.ObjectStore, cfg.ObjectStoreCredentials)
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		return backends{}, nil, fmt.Errorf("JOBAPI_OBJECT_STORE: %w", err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMetrics(reg)
	rdb.AddHook(redisstore.ErrorHook(m.redisError))
	return backends{pool: pool, rdb: rdb, objects: objects}, m, nil
}

// flagBackend is where the replica's feature flags come from.
type flagBackend struct {
	// domain is the OpenFeature domain the provider is installed in.
	domain string
	// pg is the Postgres provider, refreshed by its Run; nil when Options.FlagProvider
	// replaces it.
	pg *pgflags.Provider
	// admin is what the Features API changes flags through (nil: it answers 501); web is
	// the same store for the web UI's two-phase page (nil: it shows the flag as managed
	// elsewhere).
	admin handlers.Flags
	web   webui.Flags
	flags *featureflags.Flags
}

// startFlags installs the flag provider in the replica's OpenFeature domain.
func startFlags(cfg Config, opts Options, pool *pgxpool.Pool, log *slog.Logger) flagBackend {
	fl := flagBackend{domain: opts.FlagDomain}
	if fl.domain == "" {
		fl.domain = "jobapi"
	}
	provider := opts.FlagProvider
	if provider == nil {
		fl.pg = pgflags.New(pool, pgflags.Options{Refresh: cfg.FlagRefresh, Logger: log})
		fl.admin = featuresAPI{store: pgflags.NewStore(pool)}
		fl.web = webFlags{store: pgflags.NewStore(pool)}
		provider = fl.pg
	}
	if err := openfeature.SetNamedProviderAndWait(fl.domain, provider); err != nil {
		// Not fatal: flags evaluate to their defaults (off) and count a fallback until the
		// provider loads, so the legacy flow keeps working.
		log.Warn("feature flag provider not ready; flags are off until it loads", "error", err)
	}
	fl.flags = featureflags.New(openfeature.NewClient(fl.domain), log)
	return fl
}

// staleManagerInterval: managers go stale over days; a pass every few minutes is plenty.
const staleManagerInterval = 5 * time.Minute

// artifactsInterval: artifacts expire over days, and an orphaned upload's object waits an
// upload timeout anyway; a pass a minute keeps the store close to what the rows say, and
// refreshes the stored-bytes gauge.
const artifactsInterval = time.Minute

// domain is the build service and the maintenance loops that act on the same stores.
type domain struct {
	store   *pgstore.Store
	rs      *redisstore.Store
	svc     *builds.Service
	arts    *artifacts.Service // job artifacts, over the same stores
	logs    *joblogs.Service   // job logs' archive and reads, over the same stores
	prj     *projects.Service  // projects and what is set on them, over the same stores
	groups  *resourcegroups.Service
	access  *access.Service // project members and the permission check
	lists   *listings.Service
	runners *runners.Service
	audit   *auditlog.Service
	sweeper *retry.Sweeper
	reaper  *reaper.Reaper
	stuck   *reaper.StuckStages
	due     *reaper.DueJobs
	// staleManagers removes managers not seen for JOBAPI_STALE_MANAGER_AFTER.
	staleManagers *reaper.StaleManagers
	// artifacts expires artifacts and removes objects no row needs.
	artifacts *reaper.Artifacts
	bridges   *downstream.Bridges // creates child pipelines (trigger:)
	// failures cancels pipelines with on_job_failure: all that a failure left running.
	failures *reaper.FailureCancels
	// traces archives finished builds' logs into the object store.
	traces *reaper.TraceArchiver
	// includes is the replica's cache of repositories for include: local.
	includes *cisource.GitCache
	// pushes turns webhooks and polled heads into pipelines.
	pushes *pushes.Service
	// starts are trigger tokens and pipeline schedules, with the schedules' worker.
	starts startsFromRepository
	// hooks keeps project webhooks and their delivery log; hookWorker finds their events
	// and sends them (every replica runs one).
	hooks      *hooks.Service
	hookWorker *hooks.Worker
}

// ServiceDeps is the Postgres half of a replica's builds.Deps: store in every role Postgres
// plays and the service's settings from cfg. newDomain adds the Redis roles, the flags, the
// metrics, the object store, the clock and the log. jobapi-bench's store-only twin builds its
// service from it too (with stand-ins for the two Redis roles the service cannot do without),
// so that a store role or a setting added here reaches both.
func ServiceDeps(cfg Config, store *pgstore.Store) builds.Deps {
	return builds.Deps{Store: store, Audit: store, Projects: store,
		Config: builds.Config{TraceChunkSize: cfg.TraceChunkSize, AckTTL: cfg.AckTTL, MaxProvisioningWait: cfg.MaxProvisioningWait,
			TraceLimit: cfg.TraceLimit, LongPoll: cfg.LongPoll, Policy: builds.DefaultRetryPolicy(cfg.AutoRetryMax),
			MaxManagersPerRunner: cfg.MaxManagersPerRunner, RunnerTokenExpiresIn: cfg.RunnerTokenExpiresIn,
			RunnerTokenRotationGrace: cfg.RunnerTokenRotationGrace,
			FallbackClaims:           claimpacing.FallbackConfig{Slots: fallbackSlots(cfg), Wait: cfg.FallbackClaimWait}}}
}

// fallbackSlots is JOBAPI_FALLBACK_CLAIMS, by default a quarter of the replica's Postgres
// pool: claims made without the queue version never take the connections the acks,
// trace PATCHes and finishes of running jobs need.
func fallbackSlots(cfg Config) int {
	if cfg.FallbackClaims > 0 {
		return cfg.FallbackClaims
	}
	return max(int(cfg.DatabaseMaxConns)/4, 1)
}

func newDomain(cfg Config, opts Options, be backends, fl flagBackend, m *metrics, log *slog.Logger) domain {
	d := domain{store: pgstore.New(be.pool), rs: redisstore.New(be.rdb, cfg.RedisKeyPrefix)}
	deps := ServiceDeps(cfg, d.store)
	deps.Leases, deps.Queue, deps.QueueFeed, deps.Events, deps.Changes, deps.Live = d.rs, d.rs, d.rs, d.rs, d.rs, d.rs
	deps.TwoPhase, deps.Observer, deps.Now, deps.Log = fl.flags, m, opts.Now, log
	d.svc = builds.NewService(deps)
	d.arts = artifacts.New(artifacts.Deps{Builds: d.svc, Store: d.store, Objects: be.objects, Now: opts.Now, Log: log,
		Config: artifacts.Config{MaxSize: cfg.MaxArtifactSize, ExpireIn: cfg.ArtifactsExpireIn, UploadTimeout: cfg.ArtifactUploadTimeout}})
	d.logs = joblogs.New(joblogs.Deps{Builds: d.svc, Store: d.store, Objects: be.objects, Log: log})
	d.prj = projects.New(projects.Deps{Builds: d.svc, Store: d.store})
	d.groups = resourcegroups.New(resourcegroups.Deps{Builds: d.svc, Store: d.store})
	d.lists = listings.New(listings.Deps{Builds: d.svc, Store: d.store})
	d.runners = runners.New(runners.Deps{Builds: d.svc, Store: d.store})
	d.audit = auditlog.New(auditlog.Deps{Builds: d.svc, Store: d.store})
	d.hooks, d.hookWorker = newHooks(cfg, opts, d.store, log)
	d.access = access.New(access.Deps{Builds: d.svc, Store: d.store, Refs: d.store})
	policy := deps.Config.Policy
	d.sweeper = &retry.Sweeper{Store: d.store, Leases: d.rs, Queue: d.rs, Policy: policy,
		Interval: cfg.SweepInterval, MaxWait: cfg.MaxProvisioningWait, Now: opts.Now, Log: log, OnSweep: m.sweep,
		Notify: d.svc.NotifyPipelines}
	d.reaper = &reaper.Reaper{Store: d.store, Queue: d.rs, Interval: cfg.MaintenanceInterval, Now: opts.Now, Log: log,
		Notify: d.svc.NotifyPipelines, Ended: d.svc.LogsEnded, OnReap: m.reap,
		Params: builds.ReapParams{NoUpdates: cfg.NoUpdatesTimeout, ExecutionGrace: cfg.ExecutionGrace,
			Pending: cfg.PendingTimeout, Canceling: cfg.CancelingTimeout, Policy: policy}}
	d.stuck = &reaper.StuckStages{Store: d.store, Queue: d.rs, Timeout: cfg.StuckStageTimeout, Interval: cfg.MaintenanceInterval,
		Now: opts.Now, Log: log, Notify: d.svc.NotifyPipelines, Ended: d.svc.LogsEnded, OnCheck: m.stuck}
	d.due = &reaper.DueJobs{Store: d.store, Queue: d.rs, Interval: cfg.MaintenanceInterval, Now: opts.Now, Log: log,
		Notify: d.svc.NotifyPipelines}
	d.staleManagers = &reaper.StaleManagers{Store: d.store, After: cfg.StaleManagerAfter,
		Interval: staleManagerInterval, Now: opts.Now, Log: log}
	d.artifacts = &reaper.Artifacts{Store: d.store, Objects: be.objects, Interval: artifactsInterval, Now: opts.Now,
		Log: log, OnPass: m.artifactsPass}
	d.failures = &reaper.FailureCancels{Cancel: d.svc.CancelFailedOnce, Interval: cfg.SweepInterval, Log: log}
	d.traces = &reaper.TraceArchiver{Archive: d.logs, Requests: d.svc.TraceArchiveRequests(),
		Interval: cfg.MaintenanceInterval, Log: log, OnPass: m.traceArchives}
	return d
}

// pollTick is how often a replica looks for projects due for a poll: one indexed query when
// none is; each project is polled at its own poll_interval.
const pollTick = time.Second

// newPushes is the push service: pipelines from the repository at the pushed commit
// (cipipeline, as every pipeline from a ref), the remote's heads from git ls-remote.
func newPushes(d *domain, sources *cisource.Source, cfg Config, opts Options, log *slog.Logger) *pushes.Service {
	creator := &cipipeline.Creator{Service: d.svc, Sources: sources, ServerURL: cfg.ExternalURL, Namespace: handlers.ProjectNamespace}
	start := func(ctx context.Context, s pushes.Start) (builds.Pipeline, error) {
		return creator.FromRef(ctx, cipipeline.FromRef{ProjectID: s.ProjectID, Ref: s.Ref, SHA: s.SHA, BeforeSHA: s.BeforeSHA,
			Source: s.Source, Variables: s.Variables})
	}
	heads := func(ctx context.Context, remote string) ([]pushes.Head, error) {
		found, err := cisource.ListHeads(ctx, remote)
		out := make([]pushes.Head, len(found))
		for i, h := range found {
			out[i] = pushes.Head{Ref: h.Ref, SHA: h.SHA}
		}
		return out, err
	}
	return pushes.NewService(d.store, start, heads, opts.Now, log)
}

// newHTTP returns the HTTP server of the whole API and the listener it will serve on.
func newHTTP(cfg Config, opts Options, d *domain, fl flagBackend, reg *prometheus.Registry, rl *ratelimit.Limiter,
	hub *webui.Hub, idTokens *idtoken.Keyring, log *slog.Logger) (*http.Server, net.Listener, error) {
	// One guard for the API's PRIVATE-TOKEN and the web sign-in: a guesser's failures count
	// against one budget whichever door it knocks on.
	guard := tokenguard.NewAdminGuard(cfg.AdminToken, failureLimiter{rl})
	guard.PerClient = cfg.RateLimitAdminTokenFailures
	guard.PerUser = cfg.RateLimitTokenFailuresPerUser
	webhooks := tokenguard.NewWebhookGuard(failureLimiter{rl})
	webhooks.PerClient = cfg.RateLimitWebhookSignatureFailures
	webhooks.PerProject = cfg.RateLimitWebhookSignatureFailuresPerProject
	people := users.New(users.Deps{Store: d.store, Builds: d.svc, Now: opts.Now, MaxTokenLifetimeDays: cfg.MaxTokenLifetimeDays})
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return nil, nil, fmt.Errorf("JOBAPI_LISTEN_ADDR: %w", err)
		}
	}
	// The long poll parks held job requests on this listener: no goroutine each.
	parking := httppark.NewListener(ln)
	// include: local fetches into a directory of this replica's own, removed once the
	// replica stopped (Server.Wait); those of replicas killed before are removed here.
	git, err := cisource.OpenReplicaCache(os.TempDir())
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	d.includes = git
	sources := &cisource.Source{Git: git, Remote: cisource.NewRemote()}
	// The web UI's "Run a pipeline" creates it as the API's POST …/pipeline with a ref does;
	// trigger tokens and schedules through the same Creator.
	pipelines := &cipipeline.Creator{Service: d.svc, Sources: sources, ServerURL: cfg.ExternalURL, Namespace: handlers.ProjectNamespace}
	var sso *oidclogin.RP
	if cfg.OIDC.Enabled() {
		oc := cfg.OIDC
		oc.Now = opts.Now
		sso = oidclogin.New(oc)
	}
	d.starts = newStartsFromRepository(pipelines, cfg, opts, d, log)
	ui := webui.New(webui.Deps{OIDC: sso, Access: d.access, Service: d.svc, Artifacts: d.arts, Logs: d.logs, Projects: d.prj, Views: views.New(views.Deps{Store: d.store}), Runners: d.runners, Audit: d.audit, AdminToken: cfg.AdminToken, AdminGuard: guard, Users: people, Flags: fl.web, Revocations: d.rs,
		Hub: hub, TraceWatch: d.rs, ExternalURL: cfg.ExternalURL, Log: log, Now: opts.Now, Pipelines: pipelines,
		Triggers: d.starts.triggers, Schedules: d.starts.schedules})
	d.pushes = newPushes(d, sources, cfg, opts, log)
	d.bridges = &downstream.Bridges{Service: d.svc, Artifacts: d.arts, Sources: sources, ServerURL: cfg.ExternalURL,
		Namespace: handlers.ProjectNamespace, Interval: cfg.SweepInterval, Log: log, Now: opts.Now}
	h := handlers.New(handlers.Deps{UI: ui, Access: d.access, Service: d.svc, Artifacts: d.arts, Logs: d.logs, Projects: d.prj, ResourceGroups: d.groups, Listings: d.lists, Runners: d.runners, Audit: d.audit, Includes: sources, AdminToken: cfg.AdminToken, AdminGuard: guard, WebhookGuard: webhooks, RegistrationToken: cfg.RunnerRegistrationToken, Logger: log,
		Flags: fl.admin, Health: health{store: d.store, redis: d.rs}, Pushes: d.pushes,
		Registry: reg, TraceWatch: d.rs, Limiter: limiter{rl}, ExternalURL: cfg.ExternalURL,
		ArtifactUploadTimeout: cfg.ArtifactUploadTimeout, Triggers: d.starts.triggers, Schedules: d.starts.schedules, Hooks: d.hooks, Users: people,
		IDTokens: func(ctx context.Context) (handlers.IDTokenSigner, error) {
			s, err := idTokens.Signer(ctx)
			if err != nil {
				return nil, err // not a nil *Signer in a non-nil interface
			}
			return s, nil
		},
		Parking: parking,
		Limits: handlers.RateLimits{JobsRequest: cfg.RateLimitJobsRequest, JobUpdates: cfg.RateLimitJobUpdates,
			JobTokenFailures: cfg.RateLimitJobTokenFailures, RunnerVerify: cfg.RateLimitRunnerVerify}})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second, // slow-loris guard
		ReadTimeout:       5 * time.Minute,  // a 1 MiB trace patch on a slow link
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: long polls and waiters hold responses on purpose.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return srv, parking, nil
}

// run starts every goroutine of the replica in one errgroup, which Wait and Close own: the
// HTTP server, the workers, and the shutdown that, once ctx ends, drains requests and then
// calls afterDrain (which closes the backends).
func (s *Server) run(ctx context.Context, srv *http.Server, ln net.Listener, workers []func(context.Context) error,
	afterDrain func()) {
	ctx, s.cancel = context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	s.group = g
	for _, w := range workers {
		g.Go(func() error { return w(gctx) })
	}
	// Once the listener is closed, held long polls are answered (204: their runners ask
	// again, elsewhere), on connections then closed, instead of when their long poll ends.
	srv.RegisterOnShutdown(s.Service.ReleaseHeld)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		// In-flight requests finish; the long poll answers those it holds at once (below),
		// and the parked ones are answered too.
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		err := srv.Shutdown(sctx)
		if p, ok := ln.(*httppark.Listener); ok {
			err = errors.Join(err, p.Drain(sctx))
		}
		afterDrain()
		return err
	})
}

// Wait blocks until the replica stopped, and removes its include cache.
func (s *Server) Wait() error {
	err := s.group.Wait()
	s.closeOnce.Do(func() {
		if s.includes != nil {
			_ = s.includes.Close()
		}
	})
	return err
}

// Close stops the replica gracefully and waits for it.
func (s *Server) Close() error {
	s.cancel()
	return s.Wait()
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
	return handlers.RateDecision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter}, err
}

// failureLimiter adapts ratelimit.Limiter to tokenguard.FailureLimiter (the admin guard).
type failureLimiter struct{ l *ratelimit.Limiter }

func (f failureLimiter) Exceeded(scope, key string, limit int, window time.Duration) (bool, time.Duration) {
	return f.l.Exceeded(scope, key, ratelimit.Limit{Requests: limit, Window: window})
}

func (f failureLimiter) Fail(ctx context.Context, scope, key string, limit int, window time.Duration) (bool, time.Duration, error) {
	d, err := f.l.Allow(ctx, scope, key, ratelimit.Limit{Requests: limit, Window: window})
	return d.Allowed, d.RetryAfter, err
}
