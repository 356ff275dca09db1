package faulttest_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
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
	bin := jobapitest.BuildJobapi(t)
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

	victim, logs := jobapitest.StartServe(t, bin, a.Config, map[string]string{"JOBAPI_SWEEP_INTERVAL": "100ms"})
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
