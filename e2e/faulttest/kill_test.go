package faulttest_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// A replica is SIGKILLed in the middle of a sweep of thousands of expired acks: the batch
// it had open rolls back with its connection, what it committed stays, and a surviving
// replica processes the rest. Every expired build is processed exactly once.
//
// Replicas in this process cannot be killed, so the victim is a real `jobapi serve`. The
// kill lands mid-batch by construction: the test holds the lock of a pipeline in the middle
// of the batch order, so the victim commits the batches before it and then waits inside the
// one that reaches that pipeline, having written the builds of the pipelines before it.
func TestReplicaKilledMidSweep(t *testing.T) {
	t.Parallel()
	const (
		n           = 2000
		perPipeline = 100
		ttl         = time.Second
	)
	bin := buildJobapi(t)
	a := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.AckTTL = ttl }})
	ids := makeWaiting(t, a, n, perPipeline, ttl)
	time.Sleep(ttl + 50*time.Millisecond)
	processed := func() int {
		return jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM builds WHERE id = ANY($1) AND status <> 'waiting_for_runner_ack'", ids)
	}
	// Transactions that wrote something: only the victim's sweep writes here.
	writing := func() int {
		return jobapitest.QueryInt(t, a.Pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`)
	}

	// Hold a pipeline inside the third batch of the sweeper's default 500 (builds 1001-1500
	// by deadline, the order they were assigned in, oldest pipeline first): the first two
	// batches commit, the third fails the builds of the pipelines before the held one and
	// waits for its lock.
	ctx := context.Background()
	gate, err := a.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Rollback(ctx)
	var gatePID int
	if err := gate.QueryRow(ctx, `SELECT pg_backend_pid() FROM pipelines
		WHERE id = (SELECT pipeline_id FROM builds WHERE id = $1) FOR UPDATE`, ids[n/2+n/8]).Scan(&gatePID); err != nil {
		t.Fatal(err)
	}
	blockedWriter := func() int {
		return jobapitest.QueryInt(t, a.Pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_xid IS NOT NULL AND $1 = ANY(pg_blocking_pids(pid))`, gatePID)
	}

	victim, logs := startServe(t, bin, a.Config, map[string]string{"JOBAPI_SWEEP_INTERVAL": "100ms"})
	deadline := time.Now().Add(time.Minute)
	for blockedWriter() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the victim's sweep did not reach the held pipeline within a minute (%d processed); its log:\n%s", processed(), logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	_ = victim.Wait()
	atKill := processed() // the victim is gone: it can commit nothing more
	if err := gate.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Postgres sees the connection close and rolls the open batch back.
	for writing() > 0 {
		if time.Since(killedAt) > 10*time.Second {
			t.Fatal("the killed replica's transaction is still open after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rolledBack := time.Since(killedAt)
	if after := processed(); after != atKill {
		t.Errorf("%d builds processed when the victim was killed, %d once its transaction was gone: the open batch was not rolled back whole", atKill, after)
	}
	if atKill == 0 || atKill > n/2+n/8-perPipeline {
		t.Errorf("%d of %d processed when killed; want the batches before the held pipeline's committed, and nothing of it or after it", atKill, n)
	}

	// The survivor sweeps what is left.
	start := time.Now()
	for processed() < n {
		if _, err := a.Sweeper.SweepOnce(context.Background()); err != nil {
			t.Fatalf("survivor's sweep: %v", err)
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("%d of %d processed a minute after the kill", processed(), n)
		}
	}
	timedOutOnce(t, a.Pool, ids)
	byStatus := invariants{RetryMax: 2}.check(t, a.Pool)
	t.Logf("victim SIGKILLed with %d of %d expired acks processed and a batch open; its transaction was gone %v later, rolled back whole; the survivor swept the other %d in %v",
		atKill, n, rolledBack.Round(time.Millisecond), n-atKill, time.Since(start).Round(time.Millisecond))
	t.Logf("builds: %s", statusLine(byStatus))
}

// buildJobapi compiles cmd/jobapi into the test's temporary directory, with -race when the
// test itself runs with it (the packages then come from the test build's cache).
func buildJobapi(t *testing.T) string {
	t.Helper()
	// go test puts its own toolchain first on the test's PATH, so this is the go that runs us.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "jobapi")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "github.com/jobapi/jobapi/cmd/jobapi")...)
	cmd.Dir = jobapitest.ModuleRoot(t)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/jobapi: %v\n%s", err, out)
	}
	t.Logf("built jobapi in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// startServe runs `jobapi serve` on cfg's database, Redis and key prefix, with env
// overriding settings, and returns once it listens. The process is killed when the test
// ends (and by the kernel if the test binary dies first).
func startServe(t *testing.T, bin string, cfg server.Config, env map[string]string) (*exec.Cmd, *testenv.Buffer) {
	t.Helper()
	vars := map[string]string{
		"JOBAPI_LISTEN_ADDR":        "127.0.0.1:0",
		"JOBAPI_DATABASE_URL":       cfg.DatabaseURL,
		"JOBAPI_REDIS_URL":          cfg.RedisURL,
		"JOBAPI_REDIS_KEY_PREFIX":   cfg.RedisKeyPrefix,
		"JOBAPI_ADMIN_TOKEN":        cfg.AdminToken,
		"JOBAPI_AUTO_MIGRATE":       "false",
		"JOBAPI_ACK_TTL":            cfg.AckTTL.String(),
		"JOBAPI_DATABASE_MAX_CONNS": "5",
	}
	if len(cfg.RedisClusterAddrs) > 0 {
		vars["JOBAPI_REDIS_CLUSTER_ADDRS"] = strings.Join(cfg.RedisClusterAddrs, ",")
	}
	for k, v := range env {
		vars[k] = v
	}
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBAPI_") {
			environ = append(environ, kv)
		}
	}
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	logs := &testenv.Buffer{}
	cmd := exec.Command(bin, "serve")
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jobapi serve log:\n%s", logs)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "jobapi listening") {
		if time.Now().After(deadline) {
			t.Fatalf("jobapi serve not listening after 30 s:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "jobapi listening" {
			t.Logf("jobapi serve (pid %d) listening on %s", cmd.Process.Pid, rec.Addr)
		}
	}
	return cmd, logs
}
