// Command jobapi is the CI job coordinator: `serve` runs a replica, `migrate` manages the
// schema, `dev` runs a zero-setup local instance.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/jobapi/jobapi/migrations"
	"github.com/jobapi/jobapi/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "jobapi:", err)
		if errors.As(err, new(pipelineFailedError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `usage: jobapi <command>

commands:
  serve                    run a replica (migrates first unless JOBAPI_AUTO_MIGRATE=false)
  migrate up|down|version  manage the schema; migrate force N marks version N clean
  dev                      local throwaway Postgres and Redis, a demo runner, curl examples
  config                   list every JOBAPI_* setting with its default
  wait PROJECT PIPELINE    wait until a pipeline finished (JOBAPI_URL, JOBAPI_ADMIN_TOKEN);
                           exits 0 on success, 2 when it failed or was canceled
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("missing command")
	}
	switch args[0] {
	case "serve":
		cfg, err := server.LoadConfig(getenv)
		if err != nil {
			return err
		}
		log := newLogger(stderr, cfg.LogLevel)
		if limit := containerMemoryLimit(getenv, cgroupMemoryMax); limit > 0 {
			log.Info("Go memory limit set from the container's", "bytes", limit, "share", memoryLimitShare)
		}
		srv, err := server.Start(ctx, cfg, log, server.Options{})
		if err != nil {
			return err
		}
		return srv.Wait()
	case "migrate":
		return migrate(args[1:], getenv, stdout)
	case "dev":
		return dev(ctx, args[1:], getenv, stdout, stderr)
	case "wait":
		return wait(ctx, args[1:], getenv, stdout)
	case "config":
		for _, s := range server.Settings {
			fmt.Fprintf(stdout, "%-30s %-22q %s\n", s.Env, s.Default, s.Meaning)
		}
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func migrate(args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := server.LoadConfig(getenv)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return fmt.Errorf("migrate: want up, down, version or force N")
	}
	switch args[0] {
	case "up":
		if err := migrations.Up(cfg.DatabaseURL); err != nil {
			return err
		}
	case "down":
		if err := migrations.Down(cfg.DatabaseURL); err != nil {
			return err
		}
	case "version":
	case "force":
		if len(args) != 2 {
			return fmt.Errorf("migrate force: want a version number")
		}
		v, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("migrate force: %q is not a version number", args[1])
		}
		if err := migrations.Force(cfg.DatabaseURL, v); err != nil {
			return err
		}
	default:
		return fmt.Errorf("migrate: unknown action %q (want up, down, version or force N)", args[0])
	}
	v, dirty, err := migrations.Version(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema version %d (dirty: %t)\n", v, dirty)
	return nil
}
