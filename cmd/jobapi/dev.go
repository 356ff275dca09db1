package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/localserver"
	"github.com/jobapi/jobapi/server"
)

// dev runs jobapi with zero setup: it uses Postgres and Redis when JOBAPI_DATABASE_URL /
// JOBAPI_REDIS_URL point at running servers, otherwise starts throwaway ones from the
// machine's binaries in a temp dir, removed again on Ctrl-C. It says what it does as it
// goes (a cold start takes seconds to minutes), keeps the servers' own output in a log file
// of the temp dir, and turns two-phase commit on: the product's point, which a new user's
// real runner would otherwise never show.
func dev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	began := time.Now()
	env := map[string]string{
		"JOBAPI_ADMIN_TOKEN": "jobapi-dev-admin-token",
		// gitlab-runner register --registration-token needs one; serve wants 16 characters.
		"JOBAPI_RUNNER_REGISTRATION_TOKEN": devRegistrationToken,
		"JOBAPI_LISTEN_ADDR":               "127.0.0.1:8080",
		"JOBAPI_ACK_TTL":                   "30s",
		"JOBAPI_SWEEP_INTERVAL":            "2s",
		"JOBAPI_LOG_LEVEL":                 "warn",
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
	// initdb's and the servers' banners go here, not to the terminal; their last lines are
	// in the error when one fails to start.
	serverLogPath := filepath.Join(dir, "servers.log")
	serverLog, err := os.Create(serverLogPath)
	if err != nil {
		return err
	}
	defer serverLog.Close()
	serverLogNote := "" // printed once dev started a server
	step := func(format string, a ...any) {
		fmt.Fprintf(stdout, "[%5.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
	}

	dbURL := getenv("JOBAPI_DATABASE_URL")
	if dbURL == "" || !localserver.PostgresReachable(ctx, dbURL) {
		if dbURL != "" {
			fmt.Fprintln(stdout, "JOBAPI_DATABASE_URL does not answer; using a throwaway Postgres instead")
		}
		step("starting a throwaway Postgres in %s (initdb takes a few seconds; its output: %s)", dir, serverLogPath)
		serverLogNote = "Postgres and Redis output: " + serverLogPath + "\n"
		pg, err := localserver.StartPostgres(ctx, dir+"/pg", serverLog)
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
		step("starting a throwaway Redis (its output: %s)", serverLogPath)
		serverLogNote = "Postgres and Redis output: " + serverLogPath + "\n"
		rd, err := localserver.StartRedis(ctx, dir+"/redis", serverLog)
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
	step("migrating the database and starting jobapi")
	srv, err := server.Start(ctx, cfg, log, server.Options{Listener: ln})
	if err != nil {
		return err
	}
	runner, token, err := srv.Service.RegisterRunner(builds.WithActor(ctx, builds.Actor{Kind: builds.ActorSystem, Username: "jobapi dev"}),
		builds.Runner{Description: "demo runner", RunUntagged: true})
	if err == nil {
		err = enableTwoPhase(ctx, srv.URL, cfg.AdminToken)
	}
	if err != nil {
		_ = srv.Close()
		return err
	}
	step("ready")
	printExamples(stdout, devInfo{URL: srv.URL, Admin: cfg.AdminToken, RunnerID: runner.ID, RunnerToken: token,
		RegistrationToken: cfg.RunnerRegistrationToken, DatabaseURL: dbURL, ServerLog: serverLogNote})
	err = srv.Wait()
	fmt.Fprintln(stdout, "\njobapi dev stopped; throwaway servers removed")
	return err
}

// devRegistrationToken is dev's JOBAPI_RUNNER_REGISTRATION_TOKEN unless one is set.
const devRegistrationToken = "jobapi-dev-registration-token"

// twoPhaseFlag is the feature flag of the two-phase commit.
const twoPhaseFlag = "allow_runner_job_acknowledgement"

// enableTwoPhase turns the two-phase commit on for every project and runner through the
// Features API, as an operator would, so the instance's own flag provider hears of it.
func enableTwoPhase(ctx context.Context, base, admin string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v4/features/"+twoPhaseFlag,
		strings.NewReader(url.Values{"value": {"true"}}.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("PRIVATE-TOKEN", admin)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("turn on %s: %w", twoPhaseFlag, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("turn on %s: %s %s", twoPhaseFlag, resp.Status, body)
	}
	return nil
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

// devInfo is what printExamples tells the user.
type devInfo struct {
	URL, Admin                     string
	RunnerID                       int64
	RunnerToken, RegistrationToken string
	DatabaseURL                    string
	ServerLog                      string // a line naming the servers' log file, or ""
}

func printExamples(w io.Writer, d devInfo) {
	fmt.Fprintf(w, `
jobapi dev is running at %[1]s  (Ctrl-C stops it and removes what it started)
database: %[5]s
%[7]sadmin token: %[2]s  (web UI: %[1]s/, API: header PRIVATE-TOKEN)
registration token: %[6]s
two-phase commit: ON for every project and runner (feature flag %[8]s; off:
  curl -s -H 'PRIVATE-TOKEN: %[2]s' -X POST %[1]s/api/v4/features/%[8]s -d value=false)

# Register a real gitlab-runner (shell executor) and run it:
gitlab-runner register --non-interactive --url %[1]s --registration-token %[6]s --executor shell --description my-runner
gitlab-runner run

# Or, without registering, run the demo runner: id %[3]d, token %[4]s
gitlab-runner run-single --url %[1]s --token %[4]s --executor shell

# A project with your repository, and a pipeline from its .gitlab-ci.yml (README: "From a repository to a real runner"):
curl -s -H 'PRIVATE-TOKEN: %[2]s' -X POST %[1]s/api/v4/projects -d name=myproject -d repo_url=file:///path/to/repo

# Or play the runner with curl. Create a pipeline:
curl -s -H 'PRIVATE-TOKEN: %[2]s' -H 'Content-Type: application/json' %[1]s/api/v4/projects/1/pipeline \
  -d '{"stages":["test"],"jobs":[{"name":"hello","stage":"test","script":["echo hello"],"variables":{"GIT_STRATEGY":"none"}}]}'

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
`, d.URL, d.Admin, d.RunnerID, d.RunnerToken, d.DatabaseURL, d.RegistrationToken, d.ServerLog, twoPhaseFlag)
}
