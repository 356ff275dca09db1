// Package jobapitest starts real jobapi replicas for tests: each test gets its own Postgres
// database and Redis key prefix (from testenv), and any number of replicas sharing them.
package jobapitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/localserver"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// AdminToken is the operator token of every test instance.
const AdminToken = "test-admin-token"

// Instance is one running replica.
type Instance struct {
	*server.Server
	Config server.Config
	opts   server.Options
}

var domains atomic.Int64

// Options adjust a test instance.
type Options struct {
	// Configure edits the config before start (TTLs, intervals…).
	Configure func(*server.Config)
	// Now replaces the clock.
	Now func() time.Time
	// Sweeper runs the background sweeper; off by default so tests call SweepOnce.
	Sweeper bool
	// Log receives the server log (default: discarded unless JOBAPI_TEST_LOG=1).
	Log io.Writer
	// RateLimitCallTimeout is server.Options.RateLimitCallTimeout.
	RateLimitCallTimeout time.Duration
	// Tracer observes every statement of the replica's Postgres pool (server.Options.Tracer).
	Tracer pgx.QueryTracer
}

// OnRedis is a Configure that points a replica at a Redis server of the test's own
// (testenv.OwnRedis: one the test restarts or breaks) instead of the shared one, then
// applies more (nil: nothing more).
func OnRedis(r *localserver.Redis, more func(*server.Config)) func(*server.Config) {
	return func(cfg *server.Config) {
		cfg.RedisURL = r.URL
		cfg.RedisClusterAddrs = nil
		if more != nil {
			more(cfg)
		}
	}
}

// Start runs a replica on a fresh database and Redis key prefix.
func Start(t testing.TB, o Options) *Instance {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	rdb, prefix := testenv.Redis(t)
	ropt := rdb.Options()
	cfg, err := server.LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DatabaseURL = dbURL
	cfg.RedisURL = fmt.Sprintf("redis://%s/%d", ropt.Addr, ropt.DB)
	if ropt.Password != "" {
		cfg.RedisURL = fmt.Sprintf("redis://:%s@%s/%d", url.QueryEscape(ropt.Password), ropt.Addr, ropt.DB)
	}
	cfg.RedisKeyPrefix = prefix
	cfg.AdminToken = AdminToken
	cfg.AutoMigrate = false // the template database is migrated already
	cfg.SweepInterval = 100 * time.Millisecond
	cfg.FlagRefresh = 200 * time.Millisecond
	cfg.DatabaseMaxConns = 10
	// Replicas of the instance share its object store, as they would a bucket.
	cfg.ObjectStore = "file://" + t.TempDir()
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	return startWith(t, cfg, o)
}

func startWith(t testing.TB, cfg server.Config, o Options) *Instance {
	t.Helper()
	w := o.Log
	if w == nil {
		w = io.Discard
		if os.Getenv("JOBAPI_TEST_LOG") == "1" {
			w = os.Stderr
		}
	}
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{Now: o.Now, Listener: ln, DisableSweeper: !o.Sweeper,
		FlagDomain: fmt.Sprintf("jobapitest-%d", domains.Add(1)), RateLimitCallTimeout: o.RateLimitCallTimeout,
		Tracer: o.Tracer}
	srv, err := server.Start(context.Background(), cfg, log, opts)
	if err != nil {
		t.Fatalf("start jobapi: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &Instance{Server: srv, Config: cfg, opts: opts}
}

// Replica starts another replica on the same database and Redis key space; o.Configure
// edits a copy of the instance's config for it.
func (i *Instance) Replica(t testing.TB, o Options) *Instance {
	t.Helper()
	cfg := i.Config
	if o.Configure != nil {
		o.Configure(&cfg) // on the instance's config: same database, Redis and store
	}
	return startWith(t, cfg, o)
}

// CreateRunner registers a runner for tags (untagged jobs only when there are none) and
// returns its id and token.
func (i *Instance) CreateRunner(t testing.TB, tags ...string) (int64, string) {
	t.Helper()
	return i.RegisterRunner(t, "test runner", tags, len(tags) == 0)
}

// RegisterRunner registers a runner with the operator's POST /user/runners and returns its
// id and token.
func (i *Instance) RegisterRunner(t testing.TB, description string, tags []string, runUntagged bool) (int64, string) {
	t.Helper()
	var out api.RunnerCreated
	if tags == nil {
		tags = []string{}
	}
	i.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": description, "tag_list": tags, "run_untagged": runUntagged}, &out)
	return out.ID, out.Token
}

// Job is one job of a pipeline definition.
type Job map[string]any

// CreatePipeline posts a pipeline with the given stages and jobs for a project.
func (i *Instance) CreatePipeline(t testing.TB, projectID int64, stages []string, jobs ...Job) api.Pipeline {
	t.Helper()
	var p api.Pipeline
	i.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", projectID),
		map[string]any{"stages": stages, "jobs": jobs}, &p)
	return p
}

// CreateYAML posts a .gitlab-ci.yml for a project on ref main, at sha unless it is "" (no
// sha: auto-cancel leaves the older pipelines alone), and requires a 201.
func (i *Instance) CreateYAML(t testing.TB, projectID int64, sha, yaml string) api.Pipeline {
	t.Helper()
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=main", projectID)
	if sha != "" {
		path += "&sha=" + url.QueryEscape(sha)
	}
	resp, body := i.Do(t, "POST", path, yaml, "Content-Type", "application/yaml")
	WantStatus(t, resp, body, http.StatusCreated)
	var p api.Pipeline
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("create pipeline: decode %.300s: %v", body, err)
	}
	return p
}

// EnableTwoPhase turns allow_runner_job_acknowledgement on for one project and waits until
// this replica's provider has loaded it.
func (i *Instance) EnableTwoPhase(t testing.TB, projectID int64) {
	t.Helper()
	i.MustDo(t, http.StatusCreated, "POST", "/api/v4/features/allow_runner_job_acknowledgement",
		map[string]any{"value": true, "project": fmt.Sprint(projectID)}, nil)
	i.WaitFlags(t)
}

// WaitFlags waits long enough for every replica's flag provider to see a change (NOTIFY
// usually delivers it within milliseconds; the refresh period bounds it).
func (i *Instance) WaitFlags(t testing.TB) {
	time.Sleep(i.Config.FlagRefresh + 300*time.Millisecond)
}

// Job returns the operator view of a job.
func (i *Instance) Job(t testing.TB, projectID, id int64) api.JobDetail {
	t.Helper()
	var j api.JobDetail
	i.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d", projectID, id), nil, &j)
	return j
}

// Events returns a job's event types, oldest first.
func (i *Instance) Events(t testing.TB, projectID, id int64) []api.Event {
	t.Helper()
	var ev []api.Event
	i.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/events?per_page=100", projectID, id), nil, &ev)
	return ev
}

// EventTypes lists the types of events.
func EventTypes(ev []api.Event) string {
	types := make([]string, len(ev))
	for i, e := range ev {
		types[i] = e.Type
	}
	return strings.Join(types, ",")
}
