package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/server"
)

// env is the system under test and the bench's own handles on its backends.
type env struct {
	cfg        config
	log        io.Writer
	baseURL    string
	adminToken string
	// objectStore says where the jobapi keeps artifacts (the artifacts scenario's result).
	objectStore string
	dbURL       string
	db          *pgxpool.Pool // the bench's own pool on jobapi's database (seeding, checks)
	rdb         *redis.Client
	benchKeys   string         // Redis prefix of the bench's own keys (baseline)
	srv         *server.Server // nil with --url
	// serverCfg is the in-process jobapi's configuration; with --url, the defaults (the
	// store-only twins take the service's settings from it).
	serverCfg server.Config
	queries   *queryCounter // nil with --url
	redisCmds *redisCounter // the in-process jobapi's Redis commands; nil with --url
	serverPID int
	http      *http.Client
	flagWait  time.Duration
	serverLog *slog.Logger
	// serverPrefix is the in-process jobapi's Redis key prefix ("" with --url).
	serverPrefix string
	// floorCost is the floor scenario's result, which the efficiency table (efficiency.go) divides by.
	floorCost *floorCost

	cleanups []func()
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func setup(ctx context.Context, cfg config, log io.Writer) (_ *env, err error) {
	e := &env{cfg: cfg, log: log, http: &http.Client{Timeout: 5 * time.Minute}, serverPID: cfg.ServerPID}
	defer func() {
		if err != nil {
			e.close()
		}
	}()

	// Postgres: a fresh database of the bench's own unless told to use the given one.
	e.dbURL = cfg.DatabaseURL
	if cfg.URL == "" && !cfg.ReuseDatabase {
		name := "jobapi_bench_" + randHex(6)
		admin, err := pgx.Connect(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("--database-url: %w", err)
		}
		_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		_ = admin.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("create the bench database: %w", err)
		}
		e.logf("database %s created", name)
		e.cleanups = append(e.cleanups, func() {
			if cfg.KeepDatabase {
				e.logf("database %s kept (--keep-db)", name)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			admin, err := pgx.Connect(ctx, cfg.DatabaseURL)
			if err != nil {
				e.logf("drop %s: %v", name, err)
				return
			}
			defer admin.Close(ctx)
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				e.logf("drop %s: %v", name, err)
			}
		})
		if e.dbURL, err = withDatabase(cfg.DatabaseURL, name); err != nil {
			return nil, err
		}
	}

	// Redis: the server's keys under a prefix of this run, the bench's own under another.
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	e.rdb = redis.NewClient(ropt)
	run := randHex(4)
	e.benchKeys = "jobapi-bench-" + run + ":"
	e.cleanups = append(e.cleanups, func() { e.deleteKeys(e.benchKeys) })

	if cfg.URL == "" {
		prefix := cfg.RedisPrefix
		if prefix == "" {
			prefix = "jobapi-bench-" + run + "-srv:"
			e.cleanups = append(e.cleanups, func() { e.deleteKeys(prefix) })
		}
		e.serverPrefix = prefix
		if err := e.startServer(prefix); err != nil {
			return nil, err
		}
	} else {
		e.baseURL, e.adminToken = cfg.URL, cfg.AdminToken
		e.objectStore = "the --url jobapi's JOBAPI_OBJECT_STORE"
		e.flagWait = 3 * time.Second
		if e.serverCfg, err = server.LoadConfig(func(string) string { return "" }); err != nil {
			return nil, err
		}
	}

	pcfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 8
	if e.db, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	// Added last so that it closes first, before the database is dropped.
	e.cleanups = append(e.cleanups, e.db.Close, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = e.db.Exec(ctx, `DROP TABLE IF EXISTS jobapi_bench_baseline`)
	})
	return e, nil
}

func (e *env) startServer(prefix string) error {
	cfg, err := server.LoadConfig(func(string) string { return "" })
	if err != nil {
		return err
	}
	cfg.DatabaseURL = e.dbURL
	cfg.RedisURL = e.cfg.RedisURL
	cfg.RedisKeyPrefix = prefix
	objects, err := os.MkdirTemp("", "jobapi-bench-objects-")
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, func() { _ = os.RemoveAll(objects) })
	cfg.ObjectStore = "file://" + objects
	e.objectStore = "directory " + objects
	if e.cfg.ObjectStore != "" {
		cfg.ObjectStore, e.objectStore = e.cfg.ObjectStore, e.cfg.ObjectStore
		cfg.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"),
			SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}
	}
	// The artifacts scenario sends --artifact-size, past the default limit of 100 MB.
	cfg.MaxArtifactSize = max(cfg.MaxArtifactSize, 1<<40)
	cfg.AdminToken = "bench-" + randHex(16)
	cfg.AutoMigrate = true
	cfg.SweepInterval = e.cfg.SweepInterval
	cfg.MaintenanceInterval = e.cfg.SweepInterval
	cfg.DatabaseMaxConns = int32(e.cfg.DBMaxConns)
	// A few dozen bench runners stand for a fleet of thousands, each far busier than a real
	// runner: per-token limits would answer 429. The limiter still runs, and costs what it
	// costs, on every request.
	cfg.RateLimitJobsRequest = max(cfg.RateLimitJobsRequest, 1<<30)
	cfg.RateLimitJobUpdates = max(cfg.RateLimitJobUpdates, 1<<30)
	if e.cfg.FlagRefresh > 0 {
		cfg.FlagRefresh = e.cfg.FlagRefresh
	}
	e.flagWait = cfg.FlagRefresh + 300*time.Millisecond
	e.serverCfg = cfg

	logw := io.Discard
	if e.cfg.ServerLog != "" {
		f, err := os.Create(e.cfg.ServerLog)
		if err != nil {
			return err
		}
		e.cleanups = append(e.cleanups, func() { _ = f.Close() })
		logw = f
	}
	level := slog.LevelWarn
	if err := level.UnmarshalText([]byte(e.cfg.ServerLogLevel)); err != nil {
		return fmt.Errorf("--server-log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: level}))
	e.serverLog = log

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	e.queries = newQueryCounter()
	if e.cfg.DebugQueries {
		e.queries.bySQL = map[string]int64{}
	}
	opts := server.Options{Listener: ln, FlagDomain: "jobapi-bench-" + randHex(4), Tracer: e.queries}
	// Every goroutine the replica starts inherits this label, so a CPU profile tells the
	// server's CPU from the load generator's in the one process.
	pprof.Do(context.Background(), pprof.Labels(labelKey, "server"), func(ctx context.Context) {
		e.srv, err = server.Start(ctx, cfg, log, opts)
	})
	if err != nil {
		return fmt.Errorf("start jobapi: %w", err)
	}
	e.redisCmds = &redisCounter{}
	e.srv.Redis.AddHook(e.redisCmds)
	e.cleanups = append(e.cleanups, func() {
		if err := e.srv.Close(); err != nil {
			e.logf("jobapi stopped: %v", err)
		}
	})
	e.baseURL, e.adminToken = e.srv.URL, cfg.AdminToken
	e.logf("jobapi in-process at %s (pool %d conns, sweep every %s, server log level %s)",
		e.baseURL, cfg.DatabaseMaxConns, cfg.SweepInterval, level)
	return nil
}

// startReplica starts another in-process replica on the same database and Redis prefix,
// with cfg changed by change; its statements are counted with the first one's. The caller
// closes it.
func (e *env) startReplica(change func(*server.Config), log *slog.Logger) (*server.Server, error) {
	if e.srv == nil {
		return nil, errors.New("a second replica needs the in-process jobapi (not --url)")
	}
	cfg := e.serverCfg
	change(&cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	opts := server.Options{Listener: ln, FlagDomain: "jobapi-bench-" + randHex(4), Tracer: e.queries}
	var srv *server.Server
	pprof.Do(context.Background(), pprof.Labels(labelKey, "server"), func(ctx context.Context) {
		if log == nil {
			log = e.serverLog
		}
		srv, err = server.Start(ctx, cfg, log, opts)
	})
	if err != nil {
		return nil, fmt.Errorf("start a second jobapi: %w", err)
	}
	return srv, nil
}

func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
}

func (e *env) deleteKeys(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := e.rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			_ = e.rdb.Unlink(ctx, batch...).Err()
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		_ = e.rdb.Unlink(ctx, batch...).Err()
	}
}

// withDatabase returns the server URL u pointing at database name instead.
func withDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return "", fmt.Errorf("--database-url: want a postgres:// URL")
	}
	p.Path = "/" + name
	return p.String(), nil
}

// admin sends an operator request with the admin token; out, when set, receives the JSON body.
func (e *env) admin(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.baseURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("PRIVATE-TOKEN", e.adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// enableTwoPhase turns allow_runner_job_acknowledgement on for every project.
func (e *env) enableTwoPhase(ctx context.Context) error {
	if err := e.admin(ctx, http.MethodPost, "/api/v4/features/allow_runner_job_acknowledgement",
		map[string]any{"value": true}, nil); err != nil {
		return fmt.Errorf("enable two-phase: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(e.flagWait):
	}
	return nil
}
