package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/server"
)

type config struct {
	Scenarios      []string
	URL            string
	AdminToken     string
	DatabaseURL    string
	ReuseDatabase  bool
	KeepDatabase   bool
	RedisURL       string
	RedisPrefix    string
	ServerPID      int
	DBMaxConns     int
	SweepInterval  time.Duration
	FlagRefresh    time.Duration
	ServerLog      string
	ServerLogLevel string
	ProfileDir     string
	DebugQueries   bool
	StoreOnly      bool

	ScenarioTimeout time.Duration
	PerPipeline     int

	BaselineDuration time.Duration
	FloorDuration    time.Duration
	BaselineConns    int
	AdjacentBaseline time.Duration

	Runners   int
	CycleJobs int
	AckJobs   int
	Repeat    int

	IdleRunners      int
	IdleInterval     time.Duration
	IdleDuration     time.Duration
	IdleBacklog      int
	IdleFleetProcess bool

	PickupRunners  int
	PickupInterval time.Duration
	PickupLongPoll time.Duration
	// OverloadRedisLatency and OverloadBurners: the overload scenario's slow Redis and
	// CPU-spinning processes.
	OverloadRedisLatency time.Duration
	OverloadBurners      int
	PickupIdle           time.Duration
	PickupJobs           int
	PickupEvery          time.Duration
	PickupModes          []string

	SweepWaiting int
	SweepExpired int

	ScaleSizes   []int
	ScaleMax     int
	ScaleHistory int
	ScaleClaims  int
	ScaleRunners int

	ArtifactSize int64
	ObjectStore  string

	YAMLJobs   int
	YAMLRepeat int

	TracePatches   int
	TracePatchSize int

	ArchiveJobs int
}

var allScenarios = []string{"baseline", "floor", "cycle", "ack", "idle", "pickup", "overload", "memory", "sweep", "artifacts", "yaml", "trace", "archive", "scale"}

type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		mult := 1
		if s, ok := strings.CutSuffix(f, "k"); ok {
			f, mult = s, 1000
		} else if s, ok := strings.CutSuffix(f, "m"); ok {
			f, mult = s, 1_000_000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return fmt.Errorf("want positive counts such as 1k,10k,1m, got %q", v)
		}
		*l = append(*l, n*mult)
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("jobapi-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run, in this order: "+strings.Join(allScenarios, ", "))
	short := fs.Bool("short", false, "small sizes and durations: a run of a minute or two (make bench)")
	fs.StringVar(&c.URL, "url", "", "load this running jobapi instead of starting one in-process (needs --admin-token and its --database-url)")
	fs.StringVar(&c.AdminToken, "admin-token", os.Getenv("JOBAPI_ADMIN_TOKEN"), "operator token of the --url jobapi")
	fs.StringVar(&c.DatabaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"Postgres server on which a database jobapi_bench_<random> is created and dropped; with --url or --reuse-database, jobapi's database itself")
	fs.BoolVar(&c.ReuseDatabase, "reuse-database", false, "use --database-url as the (migrated or empty) database instead of creating one")
	fs.BoolVar(&c.KeepDatabase, "keep-db", false, "do not drop the bench database at the end")
	fs.StringVar(&c.RedisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis for the in-process jobapi and the baseline")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "", "key prefix of the in-process jobapi (default: one of this run's own, deleted at the end)")
	fs.IntVar(&c.ServerPID, "server-pid", 0, "with --url: pid of the jobapi process, to read its CPU time and peak RSS from /proc")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 20, "in-process jobapi's Postgres pool (JOBAPI_DATABASE_MAX_CONNS)")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", 5*time.Second, "ack sweep interval (JOBAPI_SWEEP_INTERVAL; with --url, say what the server uses)")
	fs.DurationVar(&c.FlagRefresh, "flag-refresh", 0, "in-process jobapi's flag refresh (default: JOBAPI_FLAG_REFRESH's)")
	fs.StringVar(&c.ServerLog, "server-log", "", "file for the in-process jobapi's log (default: discarded)")
	fs.StringVar(&c.ServerLogLevel, "server-log-level", "warn", "in-process jobapi's log level (info logs a line per request)")
	fs.StringVar(&c.ProfileDir, "profile-dir", "", "write each scenario's CPU profile there (the server's samples carry the label jobapi_bench=server)")
	fs.BoolVar(&c.StoreOnly, "store-only", true, "cycle, ack: also run the same Postgres work through jobapi's store alone (no HTTP, JSON or Redis)")
	fs.BoolVar(&c.DebugQueries, "debug-queries", false, "log each scenario's Postgres statements by count")
	fs.DurationVar(&c.ScenarioTimeout, "scenario-timeout", 10*time.Minute, "give up on a scenario's load after this long")
	fs.IntVar(&c.PerPipeline, "jobs-per-pipeline", 10, "seeded builds per pipeline")
	fs.DurationVar(&c.BaselineDuration, "baseline-duration", 10*time.Second, "baseline: how long to run the UPDATEs (Redis: half as long)")
	fs.DurationVar(&c.FloorDuration, "floor-duration", 5*time.Second, "floor: how long to measure each of update and http (each --repeat times)")
	fs.DurationVar(&c.AdjacentBaseline, "adjacent-baseline", 3*time.Second, "cycle, ack: re-measure the UPDATE ceiling this long right before, and check the target against it (0: off)")
	fs.IntVar(&c.BaselineConns, "baseline-conns", 0, "baseline: connections (default: --db-max-conns, as many as jobapi's pool)")
	fs.IntVar(&c.Runners, "runners", 32, "cycle, ack: concurrent runners")
	fs.IntVar(&c.CycleJobs, "cycle-jobs", 20_000, "cycle: jobs to run")
	fs.IntVar(&c.AckJobs, "ack-jobs", 30_000, "ack: pre-assigned jobs to acknowledge")
	fs.IntVar(&c.Repeat, "repeat", 1, "floor (medians of each part), cycle, ack: run each this many times, each with its adjacent baseline, and report the run with the median ratio (the others' ratios listed with it; profiles are the last run's): on a shared machine one run's ratio can be off by a fifth")
	fs.IntVar(&c.IdleRunners, "idle-runners", 1000, "idle: runners polling")
	fs.DurationVar(&c.IdleInterval, "idle-interval", 3*time.Second, "idle: each runner's poll interval")
	fs.DurationVar(&c.IdleDuration, "idle-duration", 30*time.Second, "idle: measured time")
	fs.IntVar(&c.IdleBacklog, "idle-backlog", 100_000, "idle: pending builds for other runners meanwhile (the memory target's)")
	fs.BoolVar(&c.IdleFleetProcess, "idle-fleet-process", true, "idle: play the runners from a child process, so that the peak RSS is jobapi's (false: in this process)")
	fs.IntVar(&c.PickupRunners, "pickup-runners", 10_000, "pickup: runners in the fleet (a child process)")
	fs.DurationVar(&c.PickupInterval, "pickup-interval", 3*time.Second, "pickup: each runner's request interval")
	fs.DurationVar(&c.PickupLongPoll, "pickup-long-poll", 50*time.Second, "pickup: the second replica's JOBAPI_LONG_POLL")
	fs.DurationVar(&c.PickupIdle, "pickup-idle", 10*time.Second, "pickup: measured idle phase of each mode (no jobs)")
	fs.IntVar(&c.PickupJobs, "pickup-jobs", 30, "pickup: jobs created in each mode's job phase")
	fs.DurationVar(&c.PickupEvery, "pickup-every", time.Second, "pickup: one job created this often")
	pickupModes := fs.String("pickup-modes", "poll,long_poll", "pickup: poll (every interval, one replica), long_poll (held requests on a second replica)")
	fs.DurationVar(&c.OverloadRedisLatency, "overload-redis-latency", 600*time.Millisecond, "overload: added to every Redis answer the replica gets (a proxy; jobapi's Redis call timeout is 500 ms)")
	fs.IntVar(&c.OverloadBurners, "overload-burners", runtime.NumCPU(), "overload: processes that each spin a core meanwhile")
	fs.IntVar(&c.SweepWaiting, "sweep-waiting", 100_000, "sweep: builds waiting for their ack")
	fs.IntVar(&c.SweepExpired, "sweep-expired", 10_000, "sweep: of which expired")
	c.ScaleSizes = intList{1000, 10_000, 100_000, 1_000_000}
	fs.Var((*intList)(&c.ScaleSizes), "scale-sizes", "scale: pending builds at each point")
	fs.IntVar(&c.ScaleMax, "scale-max", 0, "scale: skip sizes above this and cap the history (0: no cap)")
	fs.IntVar(&c.ScaleHistory, "scale-history", 1_000_000, "scale: finished builds of history at the last point (0: none)")
	fs.IntVar(&c.ScaleClaims, "scale-claims", 2000, "scale: claims measured at each point")
	fs.IntVar(&c.ScaleRunners, "scale-runners", 8, "scale: concurrent runners claiming")
	artifactSize := fs.String("artifact-size", "1GB", "artifacts: the archive uploaded and downloaded (sizes such as 1GB, 100MB)")
	fs.StringVar(&c.ObjectStore, "object-store", "", "in-process jobapi's JOBAPI_OBJECT_STORE, e.g. s3://bucket?endpoint=http://127.0.0.1:8333 with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set (default: a directory of the run's own)")
	fs.IntVar(&c.YAMLJobs, "yaml-jobs", 2000, "yaml: jobs in the .gitlab-ci.yml of each pipeline created")
	fs.IntVar(&c.YAMLRepeat, "yaml-repeat", 5, "yaml: pipelines created (the median is the result)")
	fs.IntVar(&c.TracePatches, "trace-patches", 500, "trace: PATCHes each runner's job streams")
	fs.IntVar(&c.TracePatchSize, "trace-patch-size", 8192, "trace: bytes per PATCH")
	fs.IntVar(&c.ArchiveJobs, "archive-jobs", 5000, "archive: finished builds whose logs are archived")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *short {
		// Only what was not given explicitly.
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("baseline-duration", func() { c.BaselineDuration = 3 * time.Second })
		def("floor-duration", func() { c.FloorDuration = 2 * time.Second })
		def("cycle-jobs", func() { c.CycleJobs = 2000 })
		def("ack-jobs", func() { c.AckJobs = 3000 })
		def("idle-runners", func() { c.IdleRunners = 200 })
		def("idle-interval", func() { c.IdleInterval = time.Second })
		def("idle-duration", func() { c.IdleDuration = 5 * time.Second })
		def("idle-backlog", func() { c.IdleBacklog = 10_000 })
		def("pickup-runners", func() { c.PickupRunners = 1000 })
		def("pickup-idle", func() { c.PickupIdle = 5 * time.Second })
		def("pickup-jobs", func() { c.PickupJobs = 10 })
		def("sweep-waiting", func() { c.SweepWaiting = 10_000 })
		def("sweep-expired", func() { c.SweepExpired = 1000 })
		def("sweep-interval", func() { c.SweepInterval = time.Second })
		def("scale-max", func() { c.ScaleMax = 10_000 })
		def("scale-claims", func() { c.ScaleClaims = 500 })
		def("artifact-size", func() { *artifactSize = "100MB" })
		def("trace-patches", func() { c.TracePatches = 200 })
		def("archive-jobs", func() { c.ArchiveJobs = 1000 })
	}
	size, err := server.ParseBytes(*artifactSize)
	if err != nil {
		return c, fmt.Errorf("--artifact-size: %w", err)
	}
	c.ArtifactSize = size
	for _, m := range strings.Split(*pickupModes, ",") {
		m = strings.TrimSpace(m)
		if m != "poll" && m != "long_poll" {
			return c, fmt.Errorf("--pickup-modes: unknown mode %q (have poll, long_poll)", m)
		}
		c.PickupModes = append(c.PickupModes, m)
	}
	for _, s := range strings.Split(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allScenarios, s) {
			return c, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
		if !slices.Contains(c.Scenarios, s) {
			c.Scenarios = append(c.Scenarios, s)
		}
	}
	// Always in the documented order: baseline first (the others are ratios to it), scale
	// last (it truncates the tables).
	slices.SortFunc(c.Scenarios, func(a, b string) int { return slices.Index(allScenarios, a) - slices.Index(allScenarios, b) })
	if c.BaselineConns <= 0 {
		c.BaselineConns = c.DBMaxConns
	}
	if c.URL != "" && c.AdminToken == "" {
		return c, errors.New("--url needs --admin-token (or JOBAPI_ADMIN_TOKEN)")
	}
	if c.SweepExpired > c.SweepWaiting {
		return c, errors.New("--sweep-expired must not exceed --sweep-waiting")
	}
	for _, n := range []int{c.Runners, c.IdleRunners, c.PickupRunners, c.PickupJobs, c.ScaleRunners, c.BaselineConns, c.PerPipeline, c.Repeat, c.ArchiveJobs} {
		if n <= 0 {
			return c, errors.New("runner, connection and pipeline counts must be positive")
		}
	}
	if c.PerPipeline > 100 {
		return c, errors.New("--jobs-per-pipeline: at most 100")
	}
	return c, nil
}
