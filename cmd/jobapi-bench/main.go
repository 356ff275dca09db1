// Command jobapi-bench loads a jobapi through the runner wire protocol (runnerclient, over
// HTTP) and measures it against the same machine's own ceiling (its baseline and floor).
//
// By default it creates a database jobapi_bench_<random> on --database-url, starts a jobapi
// in-process on it (server.Start, Redis keys under a prefix of its own), runs the scenarios,
// and drops the database. With --url it loads a running jobapi instead; --database-url must
// then be that jobapi's database (it is seeded and, by scale, truncated: use a deployment
// dedicated to benchmarking).
//
// Scenarios: baseline, cycle, ack, idle, sweep, scale; artifacts; overload; floor and pickup (with floor in
// the run, the efficiency table of CPU per job ÷ floor and pickup targets closes the output). It prints a table and one
// JSON line per scenario. See docs/performance.md.
//
// Files: main.go and flags.go run it; env.go, runners.go and seed.go set up the system under
// test; scenario_*.go are the scenarios, twin.go their store-only twins' service; load.go,
// fleet.go and pickup_fleet.go generate the load; latency.go, queries.go, window.go, machine.go,
// tested.go and profiles.go measure it; result.go, report.go and efficiency.go turn measurements
// into the tables and the JSON lines.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv(burnEnv) == "1" {
		burnMain()
	}
	if os.Getenv(fleetEnv) == "1" {
		if err := fleetMain(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "jobapi-bench fleet:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "jobapi-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// The bench's own goroutines (seeding, checks) carry a label too, so that a profile's
	// unlabelled samples are the runtime's alone.
	pprof.Do(ctx, pprof.Labels(labelKey, "bench"), func(ctx context.Context) {
		err = runScenarios(ctx, cfg, stdout, stderr)
	})
	return err
}

func runScenarios(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	e, err := setup(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.enableTwoPhase(ctx); err != nil {
		return err
	}
	if e.srv != nil {
		var autovacuum string
		_ = e.db.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&autovacuum)
		if autovacuum != "on" {
			e.logf("autovacuum is %s on this server: the bench runs VACUUM (ANALYZE) after each bulk seed", autovacuum)
		}
	}

	// Runners for cycle, ack and scale; idle registers its own fleet.
	need := 0
	for _, s := range cfg.Scenarios {
		switch s {
		case "cycle", "ack", "trace":
			need = max(need, cfg.Runners)
		case "scale":
			need = max(need, cfg.ScaleRunners)
		}
	}
	var workers []*runner
	if need > 0 {
		if workers, err = e.newRunners(ctx, need, nil); err != nil {
			return fmt.Errorf("register runners: %w", err)
		}
	}

	var results []*Result
	var failures []string
	baseline := 0.0
	for _, s := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		e.logf("--- %s", s)
		start := time.Now()
		var r *Result
		var err error
		switch s {
		case "baseline":
			r, err = e.baseline(ctx)
			if r != nil {
				baseline = r.Throughput
			}
		case "floor":
			r, err = e.floor(ctx)
		case "cycle":
			r, err = e.repeated(s, func() (*Result, error) { return e.cycle(ctx, workers, baseline) })
		case "ack":
			r, err = e.repeated(s, func() (*Result, error) { return e.ack(ctx, workers, baseline) })
		case "idle":
			var fleet []*runner
			if fleet, err = e.newRunners(ctx, cfg.IdleRunners, nil); err == nil {
				r, err = e.idle(ctx, fleet)
				closeIdle(fleet)
			}
		case "pickup":
			var fleet []*runner
			if fleet, err = e.newFleet(ctx, cfg.PickupRunners); err == nil {
				r, err = e.pickup(ctx, fleet)
			}
		case "overload":
			var fleet []*runner
			if fleet, err = e.newFleet(ctx, cfg.PickupRunners); err == nil {
				r, err = e.overload(ctx, fleet)
			}
		case "memory":
			var fleet []fleetRunner
			if fleet, err = e.newFleetRunners(ctx, cfg.PickupRunners); err == nil {
				r, err = e.memory(ctx, fleet)
			}
		case "sweep":
			r, err = e.sweep(ctx)
		case "artifacts":
			r, err = e.artifacts(ctx)
		case "yaml":
			r, err = e.yamlPipeline(ctx)
		case "trace":
			r, err = e.trace(ctx, workers)
		case "archive":
			r, err = e.archive(ctx)
		case "scale":
			r, err = e.scale(ctx, workers)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", s, err))
			e.logf("%s failed: %v", s, err)
		}
		if r != nil {
			results = append(results, r)
			if r.Errors > 0 {
				failures = append(failures, fmt.Sprintf("%s: %d calls failed", s, r.Errors))
			}
			e.logf("%s: %s %s in %s", s, fmtF(r.Throughput), r.Unit, time.Since(start).Round(100*time.Millisecond))
		}
	}
	writeTable(stdout, results)
	if t := e.efficiency(results); t != nil {
		writeEfficiency(stdout, t)
		results = append(results, t)
	}
	fmt.Fprintln(stdout)
	if err := writeJSONLines(stdout, results); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	return nil
}
