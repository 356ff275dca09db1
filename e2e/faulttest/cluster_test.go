package faulttest_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// The two-phase core on a real 3-master Redis Cluster: ack keys spread over every master,
// a prompt ack wins, a keep-alive keeps a build past its deadline of record (the sweeper's
// pipelined PTTLs cross slots and nodes), an unacknowledged build is timed out and retried
// exactly once, and its late ack is refused with 403 Job-Status failed.
func TestTwoPhaseOnRedisCluster(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	cluster := startCluster(t)
	inst := jobapitest.Start(t, jobapitest.Options{Configure: onCluster(cluster, func(c *server.Config) { c.AckTTL = ttl })})
	if _, ok := inst.Redis.(*redis.ClusterClient); !ok {
		t.Fatalf("replica uses %T, want a *redis.ClusterClient", inst.Redis)
	}
	inst.EnableTwoPhase(t, 1)
	_, token := inst.CreateRunner(t)
	r := runnerclient.New(inst.URL, token, "s_cluster")
	r.Info.Features.TwoPhaseJobCommit = true
	t.Cleanup(r.CloseIdleConnections)
	ctx := context.Background()

	const n = 30
	jobs := make([]jobapitest.Job, n)
	for i := range jobs {
		jobs[i] = jobapitest.Job{"name": "job" + strconv.Itoa(i), "stage": "test", "script": []string{"true"}}
	}
	inst.CreatePipeline(t, 1, []string{"test"}, jobs...)
	var got []*runnerclient.Job
	for len(got) < n {
		job, res, err := r.RequestJob(ctx)
		if err != nil || res.Code != http.StatusCreated {
			t.Fatalf("request %d: %d %s (%v), want 201", len(got), res.Code, res.Message, err)
		}
		got = append(got, job)
	}
	assignedAt := time.Now()

	// Every master holds some of the ack keys: the key layout spreads them over slots.
	for _, node := range cluster.Nodes {
		c := redis.NewClient(&redis.Options{Addr: node.Addr})
		keys, err := c.Keys(ctx, inst.Config.RedisKeyPrefix+"ack:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Errorf("master %s holds none of the %d ack keys", node.Addr, n)
		}
		t.Logf("master %s: %d ack keys", node.Addr, len(keys))
	}

	acked, kept, dropped := got[:10], got[10:20], got[20:]
	for _, job := range acked {
		res, err := r.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if err != nil || res.Code != http.StatusOK || res.JobStatus != "running" {
			t.Fatalf("ack of build %d: %d %q (%v), want 200 running", job.ID, res.Code, res.JobStatus, err)
		}
	}
	// Halfway through the TTL, keep half of the rest alive: each keep-alive moves the
	// deadline of record with its key.
	time.Sleep(time.Until(assignedAt.Add(ttl / 2)))
	var keptIDs []int64
	for _, job := range kept {
		res, err := r.Keepalive(ctx, job)
		if err != nil || res.Code != http.StatusOK {
			t.Fatalf("keep-alive of build %d: %d %q (%v), want 200", job.ID, res.Code, res.JobStatus, err)
		}
		keptIDs = append(keptIDs, job.ID)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM builds WHERE id = ANY($1)
		AND ack_deadline >= assigned_at + $2 * interval '1 millisecond'`, keptIDs, (ttl+ttl/2).Milliseconds()-50); n != len(kept) {
		t.Fatalf("%d of %d kept-alive builds have their deadline of record moved past the assignment's", n, len(kept))
	}
	// Their keys outlive the assignment's deadline, which only a cross-slot PTTL read can
	// tell the sweeper once that deadline is the one of record (as a keep-alive through a
	// replica from before keep-alives moved it leaves it): put it back.
	if _, err := inst.Pool.Exec(ctx, `UPDATE builds SET ack_deadline = assigned_at + $2 * interval '1 millisecond'
		WHERE id = ANY($1)`, keptIDs, ttl.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(assignedAt.Add(ttl + 200*time.Millisecond)))
	rep, err := inst.Sweeper.SweepOnce(ctx)
	if err != nil {
		t.Fatalf("sweep on the cluster: %v", err)
	}
	var droppedIDs []int64
	for _, j := range dropped {
		droppedIDs = append(droppedIDs, j.ID)
	}
	slices.Sort(rep.TimedOutIDs)
	if rep.TimedOut != len(dropped) || rep.Extended != len(kept) || !slices.Equal(rep.TimedOutIDs, droppedIDs) {
		t.Fatalf("sweep: timed out %v (%d), extended %d; want the %d dropped builds %v timed out and the %d kept alive extended",
			rep.TimedOutIDs, rep.TimedOut, rep.Extended, len(dropped), droppedIDs, len(kept))
	}
	timedOutOnce(t, inst.Pool, droppedIDs)

	// Late acks of the timed-out builds: 403 with Job-Status failed, so the runner aborts.
	for _, job := range dropped {
		res, err := r.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if err != nil || res.Code != http.StatusForbidden || res.JobStatus != "failed" || res.State != runnerclient.UpdateAbort {
			t.Fatalf("late ack of build %d: %d Job-Status %q (%v), want 403 failed", job.ID, res.Code, res.JobStatus, err)
		}
	}
	// The kept-alive builds still wait for their runner, whose ack wins.
	for _, job := range kept {
		res, err := r.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if err != nil || res.Code != http.StatusOK || res.JobStatus != "running" {
			t.Fatalf("ack of kept-alive build %d: %d %q (%v), want 200 running", job.ID, res.Code, res.JobStatus, err)
		}
	}
	// The retries are handed out (new ids, new tokens) and run; everything finishes.
	for _, job := range append(acked, kept...) {
		if res, err := r.UpdateJob(ctx, job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil || res.Code != http.StatusOK {
			t.Fatalf("finish build %d: %d (%v)", job.ID, res.Code, err)
		}
	}
	for i := 0; i < len(dropped); i++ {
		job, res, err := r.RequestJob(ctx)
		if err != nil || res.Code != http.StatusCreated {
			t.Fatalf("request retry %d: %d %s (%v), want 201", i, res.Code, res.Message, err)
		}
		if slices.Contains(droppedIDs, job.ID) {
			t.Fatalf("timed-out build %d handed out again; want its retry", job.ID)
		}
		for _, state := range []string{runnerclient.StateRunning, runnerclient.StateSuccess} {
			if res, err := r.UpdateJob(ctx, job, state, runnerclient.UpdateOptions{}); err != nil || res.Code != http.StatusOK {
				t.Fatalf("retry %d state=%s: %d (%v)", job.ID, state, res.Code, err)
			}
		}
	}
	if rep, err := inst.Sweeper.SweepOnce(ctx); err != nil || rep.TimedOut != 0 {
		t.Fatalf("second sweep: %+v, %v; want nothing left", rep, err)
	}
	if !ready(inst.URL) {
		t.Error("readiness not 200 with every master up")
	}
	// The pipeline-events subscriptions live on one of the masters: one per replica for the
	// waiters' wake-ups and one for the web UI's live pages (with the change hints), however
	// many waiters and browser tabs there are.
	channel := inst.Config.RedisKeyPrefix + "pipeline-events"
	subscribers := int64(0)
	for _, node := range cluster.Nodes {
		c := redis.NewClient(&redis.Options{Addr: node.Addr})
		n, err := c.PubSubNumSub(ctx, channel).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		subscribers += n[channel]
	}
	if subscribers != 2 {
		t.Errorf("%d subscriptions to %s across the masters, want the replica's two (waiters, live pages)", subscribers, channel)
	}
	byStatus := invariants{RetryMax: 2, Done: true}.check(t, inst.Pool)
	if byStatus["success"] != n || byStatus["failed"] != len(dropped) {
		t.Errorf("builds by status: %s; want %d success and %d failed", statusLine(byStatus), n, len(dropped))
	}
}

// Three replicas on one Postgres and one Redis Cluster, all sweepers running, runners
// spreading their requests over the three: SPEC §11's invariants 1-4 hold, also through a
// restart of one master (its keys lost; readiness, which pings every master, drops).
func TestThreeReplicasOnRedisCluster(t *testing.T) {
	t.Parallel()
	const (
		ttl      = time.Second
		retryMax = 2
		jobs     = 150
	)
	cluster := startCluster(t)
	configure := onCluster(cluster, func(c *server.Config) { c.AckTTL = ttl; c.AutoRetryMax = retryMax })
	a := jobapitest.Start(t, jobapitest.Options{Configure: configure, Sweeper: true})
	b := a.Replica(t, jobapitest.Options{Sweeper: true})
	c := a.Replica(t, jobapitest.Options{Sweeper: true})
	a.EnableTwoPhase(t, 1)
	for p := 0; p < 3; p++ {
		defs := make([]jobapitest.Job, jobs/3)
		for i := range defs {
			defs[i] = jobapitest.Job{"name": "job" + strconv.Itoa(i), "stage": "test", "script": []string{"true"}}
		}
		a.CreatePipeline(t, 1, []string{"test"}, defs...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFleet(t, a.Pool)
	f.Drop, f.Late, f.Keepalive = 0.25, 0.15, 0.2
	start := time.Now()
	f.start(ctx, 9, a, b, c)
	for jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM builds WHERE status = 'success'") < jobs/4 {
		time.Sleep(10 * time.Millisecond)
	}
	closeWindow := f.openWindow()
	restartStart := time.Now()
	probe := probeReadiness(b.URL, restartStart)
	if err := cluster.Nodes[0].Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	nodeBack := time.Since(restartStart)
	notReady, readyAgain := probe.wait(nodeBack)
	during := closeWindow()
	waitFinished(t, a, 90*time.Second)
	cancel()
	f.wait()
	t.Logf("all %d jobs finished in %v; answers: %s", jobs, time.Since(start).Round(time.Millisecond), &f.codes)

	f.codes.noServerErrors(t)
	t.Logf("master %s restarted in %v; replica readiness 503 from %v to %v; answers meanwhile: %s",
		cluster.Nodes[0].Addr, nodeBack.Round(time.Millisecond), notReady.Round(time.Millisecond), readyAgain.Round(time.Millisecond), during)
	handed := f.checkNoDoubleAssignment(t)
	checkRefusedAcks(t, a, f)
	// The slack covers the master's restart: about 2 s of CLUSTERDOWN, during which sweeps
	// fail and back off (0.1, 0.2, 0.4, 0.8, 1.6 s), then a slow -race machine.
	byStatus := invariants{RetryMax: retryMax, Deadline: ttl + a.Config.SweepInterval + 6*time.Second, Done: true}.check(t, a.Pool)
	ends := jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM builds WHERE retried_by IS NULL")
	exhausted := jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM builds WHERE retried_by IS NULL AND status = 'failed'")
	if ends != jobs || byStatus["success"]+exhausted != jobs {
		t.Errorf("%d retry chains end, %d in success and %d with the retry limit exhausted; want %d in all", ends, byStatus["success"], exhausted, jobs)
	}
	t.Logf("builds: %s (%d chains exhausted their retries); %d handed out; dropped %d; late acks %v",
		statusLine(byStatus), exhausted, handed, len(f.dropped), f.lateAcks)
	for _, inst := range []*jobapitest.Instance{a, b, c} {
		t.Logf("replica %s: timed out %v builds, redis errors: %s", inst.URL,
			inst.Metric(t, "jobapi_ack_timeouts_total"), inst.RedisErrorKinds(t))
	}
}

// waitFinished waits until no build is pending, waiting or running any more.
func waitFinished(t *testing.T, inst *jobapitest.Instance, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM builds WHERE status IN ('created', 'pending', 'waiting_for_runner_ack', 'running', 'canceling')")
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d builds still unfinished after %v", n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkRefusedAcks: a prompt ack may be refused only when the build timed out first (the
// runner was slower than the TTL); then the refusal is the late-ack 403, not a lost build.
func checkRefusedAcks(t *testing.T, inst *jobapitest.Instance, f *fleet) {
	t.Helper()
	f.mu.Lock()
	ids := slices.Clone(f.ackForbidden)
	f.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM builds WHERE id = ANY($1) AND failure_reason = 'runner_provisioning_timeout'", ids); n != len(ids) {
		t.Errorf("%d acks refused, only %d of those builds had timed out: %v", len(ids), n, ids)
	}
	t.Logf("%d acks came after their build timed out and were refused", len(ids))
}
