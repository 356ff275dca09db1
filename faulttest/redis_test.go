package faulttest_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// A sweep of thousands of expired acks meets a Redis restart: the server goes away and
// comes back LOADING a dataset. Two sweepers work through the batch (one replica's
// background sweeper, another's SweepOnce driven here); whatever a batch committed before
// Redis failed stays committed, the rest waits, and afterwards every build was processed
// exactly once: failed once with runner_provisioning_timeout, retried exactly once.
func TestRedisRestartMidSweep(t *testing.T) {
	t.Parallel()
	const (
		n   = 2000
		ttl = time.Second
	)
	own := testenv.OwnRedis(t)
	fillForLoading(t, own, 400_000, 200)
	a := jobapitest.Start(t, jobapitest.Options{Configure: onRedis(own, func(c *server.Config) { c.AckTTL = ttl })})
	ids := makeWaiting(t, a, n, 100, ttl)
	time.Sleep(ttl + 50*time.Millisecond) // every key expired, every deadline of record passed

	processed := func() int {
		return count(t, a.Pool, "SELECT count(*) FROM builds WHERE id = ANY($1) AND status <> 'waiting_for_runner_ack'", ids)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := a.Replica(t, jobapitest.Options{Sweeper: true})
	// The driven sweeper takes small batches: Redis is asked for TTLs often.
	a.Sweeper.Batch = 50
	var (
		mu       sync.Mutex
		sweepErr []string
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		for ctx.Err() == nil {
			_, err := a.Sweeper.SweepOnce(ctx)
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				sweepErr = append(sweepErr, redisstore.ErrorKind(err))
				mu.Unlock()
				if !errors.Is(err, builds.ErrUnavailable) {
					t.Errorf("sweep failed with %v; want Redis unavailability (builds.ErrUnavailable) only", err)
				}
			}
			sleep(ctx, 20*time.Millisecond)
		}
	})

	// Restart once the first batch committed, while the rest are being swept.
	for processed() == 0 {
		time.Sleep(2 * time.Millisecond)
	}
	atRestart := processed()
	restartStart := time.Now()
	restarted := make(chan error, 1)
	go func() { restarted <- own.Restart(context.Background()) }()
	// While Redis is down or LOADING, one more sweep starts: it must fail on the TTL check,
	// keep whatever it could decide, and say Redis is unavailable.
	raw := redis.NewClient(&redis.Options{Addr: own.Addr, MaxRetries: -1})
	defer raw.Close()
	for raw.Get(ctx, "probe").Err() == redis.Nil && time.Since(restartStart) < 10*time.Second {
		time.Sleep(time.Millisecond)
	}
	rep, err := a.Sweeper.SweepOnce(ctx)
	if !errors.Is(err, builds.ErrUnavailable) {
		t.Errorf("sweep while Redis restarted: %+v, %v; want a Redis unavailability error", rep, err)
	} else {
		mu.Lock()
		sweepErr = append(sweepErr, redisstore.ErrorKind(err))
		mu.Unlock()
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	outage := time.Since(restartStart)
	atBack := processed()
	for processed() < n {
		if time.Since(restartStart) > time.Minute {
			t.Fatalf("%d of %d builds processed a minute after the restart", processed(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	finished := time.Since(restartStart)
	cancel()
	wg.Wait()

	timedOutOnce(t, a.Pool, ids)
	byStatus := invariants{RetryMax: 2}.check(t, a.Pool)
	bErrors := metric(t, b.URL, `jobapi_ack_sweeps_total{result="error"}`)
	if len(sweepErr) == 0 && bErrors == 0 {
		t.Errorf("no sweep saw Redis fail: the restart missed the sweep (processed %d before, %d when Redis was back)", atRestart, atBack)
	}
	t.Logf("%d expired acks: %d processed when Redis restarted, %d when it answered again %v later (stopped, restarted, LOADING); all %d processed %v after the restart",
		n, atRestart, atBack, outage.Round(time.Millisecond), n, finished.Round(time.Millisecond))
	t.Logf("failed sweeps: driven replica %d (%s), background replica %v; Redis errors seen by the replicas: %s | %s",
		len(sweepErr), strings.Join(sweepErr, ","), bErrors, redisErrorKinds(t, a.URL), redisErrorKinds(t, b.URL))
	t.Logf("builds: %s", statusLine(byStatus))
}

// Runners keep polling, acking and finishing while Redis restarts and LOADs: no answer is
// a 500, no job request a 403; what cannot be answered without Redis (a keep-alive) is a
// 503 with Retry-After; job requests are answered from Postgres.
func TestRedisRestartUnderLoad(t *testing.T) {
	t.Parallel()
	const jobs = 300
	own := testenv.OwnRedis(t)
	fillForLoading(t, own, 400_000, 200)
	a := jobapitest.Start(t, jobapitest.Options{Sweeper: true,
		Configure: onRedis(own, func(c *server.Config) { c.AckTTL = 10 * time.Second })})
	a.EnableTwoPhase(t, 1)
	for p := 0; p < 2; p++ {
		defs := make([]jobapitest.Job, jobs/2)
		for i := range defs {
			defs[i] = jobapitest.Job{"name": "job" + string(rune('a'+i%26)) + string(rune('a'+i/26)), "stage": "test", "script": []string{"true"}}
		}
		a.CreatePipeline(t, 1, []string{"test"}, defs...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFleet(t, a.Pool)
	f.Keepalive = 0.5
	f.start(ctx, 8, a)
	for count(t, a.Pool, "SELECT count(*) FROM builds WHERE status = 'success'") < jobs/5 {
		time.Sleep(10 * time.Millisecond)
	}

	// The fault: Redis restarts, LOADs, answers again; readiness is polled throughout.
	closeWindow := f.openWindow()
	restartStart := time.Now()
	probe := probeReadiness(a.URL, restartStart)
	if err := own.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	redisBack := time.Since(restartStart)
	notReady, readyAgain := probe(redisBack)
	during := closeWindow()
	waitFinished(t, a, 60*time.Second)
	cancel()
	f.wait()

	f.codes.noServerErrors(t)
	during.noServerErrors(t)
	if notReady == 0 || readyAgain == 0 {
		t.Errorf("readiness: 503 from %v to %v after the restart began; want 503 while Redis is down, then 200", notReady, readyAgain)
	}
	if n := metric(t, a.URL, `jobapi_redis_errors_total{kind="loading"}`); n == 0 {
		t.Errorf("no Redis call saw LOADING (errors: %s); the restart was too quick to test it", redisErrorKinds(t, a.URL))
	}
	if during.get(epRequest, http.StatusCreated) == 0 {
		t.Error("no job was handed out while Redis was down: job requests should be answered from Postgres")
	}
	f.checkNoDoubleAssignment(t)
	checkRefusedAcks(t, a, f)
	byStatus := invariants{RetryMax: 2, Done: true}.check(t, a.Pool)
	if byStatus["success"] != jobs {
		t.Errorf("builds: %s; want all %d jobs successful", statusLine(byStatus), jobs)
	}
	t.Logf("Redis restarted (stop, start, LOADING) in %v; readiness was 503 for %v (from %v to %v after the restart began)",
		redisBack.Round(time.Millisecond), (readyAgain - notReady).Round(time.Millisecond), notReady.Round(time.Millisecond), readyAgain.Round(time.Millisecond))
	t.Logf("answers while Redis was down or recovering: %s", during)
	t.Logf("all answers: %s; Redis errors: %s", &f.codes, redisErrorKinds(t, a.URL))
}

// probeReadiness polls a replica's readiness from start on. The returned func, called once
// the fault is over (at `over` after start), waits until readiness was seen 503 and then
// 200 again, and returns both times since start (0 for what did not happen within 30 s, or
// for a 503 never seen within 2 s after the fault).
func probeReadiness(baseURL string, start time.Time) func(over time.Duration) (down, up time.Duration) {
	var down, up time.Duration
	var overAt atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Since(start) < 30*time.Second {
			ok := ready(baseURL)
			at := time.Since(start)
			switch {
			case !ok && down == 0:
				down = at
			case ok && down != 0:
				up = at
				return
			case ok && overAt.Load() != 0 && at > time.Duration(overAt.Load())+2*time.Second:
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func(over time.Duration) (time.Duration, time.Duration) {
		overAt.Store(int64(over))
		<-done
		return down, up
	}
}
