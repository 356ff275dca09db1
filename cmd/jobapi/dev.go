package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/localserver"
	"github.com/jobapi/jobapi/server"
)

// dev runs jobapi with zero setup: it uses Postgres and Redis when JOBAPI_DATABASE_URL /
// JOBAPI_REDIS_URL point at running servers, otherwise starts throwaway ones from the
// machine's binaries in a temp dir, removed again on Ctrl-C.
func dev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	env := map[string]string{
		"JOBAPI_ADMIN_TOKEN":    "jobapi-dev-admin-token",
		"JOBAPI_LISTEN_ADDR":    "127.0.0.1:8080",
		"JOBAPI_ACK_TTL":        "30s",
		"JOBAPI_SWEEP_INTERVAL": "2s",
		"JOBAPI_LOG_LEVEL":      "warn",
	}
	// decided holds what dev chose over the environment: a throwaway server replaces a URL
	// that does not answer.
	decided := map[string]string{}
	lookup := func(k string) string {
		if v, ok := decided[k]; ok {
			return v
		}
		if v := getenv(k); v != "" {
			return v
		}
		return env[k]
	}
	dir, err := os.MkdirTemp("", "jobapi-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Postgres runs as the postgres user when we are root: it must be able to enter dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}

	dbURL := getenv("JOBAPI_DATABASE_URL")
	if dbURL == "" || !localserver.PostgresReachable(ctx, dbURL) {
		if dbURL != "" {
			fmt.Fprintln(stdout, "JOBAPI_DATABASE_URL does not answer; using a throwaway Postgres instead")
		}
		fmt.Fprintln(stdout, "starting a throwaway Postgres in", dir)
		pg, err := localserver.StartPostgres(ctx, dir+"/pg", stderr)
		if err != nil {
			return fmt.Errorf("start Postgres (or set JOBAPI_DATABASE_URL to a running one): %w", err)
		}
		defer pg.Stop()
		dbURL = pg.URL
		if err := createDatabase(ctx, dbURL, "jobapi"); err != nil {
			return err
		}
		dbURL = strings.Replace(dbURL, "/postgres?", "/jobapi?", 1)
		decided["JOBAPI_DATABASE_URL"] = dbURL
	}
	// Artifacts go to a folder of the dev instance's own, removed with it.
	env["JOBAPI_OBJECT_STORE"] = "file://" + dir + "/objects"

	redisURL := getenv("JOBAPI_REDIS_URL")
	if getenv("JOBAPI_REDIS_CLUSTER_ADDRS") == "" && (redisURL == "" || !localserver.RedisReachable(ctx, redisURL)) {
		if redisURL != "" {
			fmt.Fprintln(stdout, "JOBAPI_REDIS_URL does not answer; using a throwaway Redis instead")
		}
		fmt.Fprintln(stdout, "starting a throwaway Redis in", dir)
		rd, err := localserver.StartRedis(ctx, dir+"/redis", stderr)
		if err != nil {
			return fmt.Errorf("start Redis (or set JOBAPI_REDIS_URL to a running one): %w", err)
		}
		defer rd.Stop()
		decided["JOBAPI_REDIS_URL"] = rd.URL
	}

	cfg, err := server.LoadConfig(lookup)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		// Port taken: any free port will do for a dev instance.
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	log := newLogger(stderr, cfg.LogLevel)
	srv, err := server.Start(ctx, cfg, log, server.Options{Listener: ln})
	if err != nil {
		return err
	}
	runner, token, err := srv.Service.RegisterRunner(ctx, builds.Runner{Description: "demo runner", RunUntagged: true}, "jobapi dev")
	if err != nil {
		_ = srv.Close()
		return err
	}
	printExamples(stdout, srv.URL, cfg.AdminToken, runner.ID, token, dbURL)
	err = srv.Wait()
	fmt.Fprintln(stdout, "\njobapi dev stopped; throwaway servers removed")
	return err
}

func createDatabase(ctx context.Context, url, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func printExamples(w io.Writer, url, admin string, runnerID int64, token, dbURL string) {
	fmt.Fprintf(w, `
jobapi dev is running at %[1]s  (Ctrl-C stops it and removes what it started)
database: %[5]s

demo runner: id %[3]d, token %[4]s

# Point a real gitlab-runner at it (shell executor):
gitlab-runner run-single --url %[1]s --token %[4]s --executor shell

# Or play the runner with curl. Create a pipeline:
curl -s -H 'PRIVATE-TOKEN: %[2]s' -H 'Content-Type: application/json' %[1]s/api/v4/projects/1/pipeline \
  -d '{"stages":["test"],"jobs":[{"name":"hello","stage":"test","script":["echo hello"],"variables":{"GIT_STRATEGY":"none"}}]}'

# Turn two-phase commit on for project 1:
curl -s -H 'PRIVATE-TOKEN: %[2]s' -X POST %[1]s/api/v4/features/allow_runner_job_acknowledgement -d value=true -d project=1

# Ask for a job as the runner (two-phase capable):
curl -s -X POST %[1]s/api/v4/jobs/request -H 'Content-Type: application/json' \
  -d '{"token":"%[4]s","system_id":"s_demo","info":{"features":{"two_phase_job_commit":true}}}'

# Acknowledge it (use the id and token from the answer), send a log line, finish it:
curl -s -X PUT %[1]s/api/v4/jobs/JOB_ID -H 'JOB-TOKEN: JOB_TOKEN' -H 'Content-Type: application/json' -d '{"state":"running"}'
curl -s -X PATCH %[1]s/api/v4/jobs/JOB_ID/trace -H 'JOB-TOKEN: JOB_TOKEN' -H 'Content-Range: 0-5' --data-binary 'hello
'
curl -s -X PUT %[1]s/api/v4/jobs/JOB_ID -H 'JOB-TOKEN: JOB_TOKEN' -H 'Content-Type: application/json' -d '{"state":"success"}'

# Watch it as an operator:
curl -s -H 'PRIVATE-TOKEN: %[2]s' %[1]s/api/v4/projects/1/jobs/JOB_ID
curl -s -H 'PRIVATE-TOKEN: %[2]s' %[1]s/api/v4/projects/1/jobs/JOB_ID/events
curl -s -H 'PRIVATE-TOKEN: %[2]s' '%[1]s/api/v4/admin/jobs?status=waiting_for_runner_ack'
`, url, admin, runnerID, token, dbURL)
}
