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

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// A sweep of thousands of expired acks meets a Redis restart: the server goes away and
// comes back LOADING a dataset. Two sweepers work through the batch (one replica's
// background sweeper, another's SweepOnce driven here); whatever a batch committed before
// Redis failed stays committed, the rest waits, and afterwards every build was processed
// exactly once: failed once with runner_provisioning_timeout, retried exactly once.
//
// The fault window is held by construction, not by timing: half the builds are row-locked
// by the test (the sweepers' SKIP LOCKED passes them over), so sweeping is certainly
// mid-way when Redis restarts; Redis stays LOADING until the test releases it, after a sweep
// that had those builds to decide has failed on it.
func TestRedisRestartMidSweep(t *testing.T) {
	t.Parallel()
	const (
		n   = 2000
		ttl = time.Second
	)
	own := testenv.OwnRedis(t)
	fillForLoading(t, own)
	a := jobapitest.Start(t, jobapitest.Options{Configure: jobapitest.OnRedis(own, func(c *server.Config) { c.AckTTL = ttl })})
	ids := makeWaiting(t, a, n, 100, ttl)
	time.Sleep(ttl + 50*time.Millisecond) // every key expired, every deadline of record passed

	processed := func() int {
		return jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM builds WHERE id = ANY($1) AND status <> 'waiting_for_runner_ack'", ids)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The second half (whole pipelines: ids come in pipeline order) waits behind the test's
	// row locks until Redis is down.
	held, err := a.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(context.Background())
	if _, err := held.Exec(ctx, "SELECT id FROM builds WHERE id = ANY($1) FOR UPDATE", ids[n/2:]); err != nil {
		t.Fatal(err)
	}

	b := a.Replica(t, jobapitest.Options{Sweeper: true})
	// The driven sweeper takes small batches: Redis is asked for TTLs often.
	a.Sweeper.Batch = 50
	var (
		mu       sync.Mutex
		sweepErr []string
		wg       sync.WaitGroup
	)
	sweepFailed := func(err error) {
		mu.Lock()
		sweepErr = append(sweepErr, redisstore.ErrorKind(err))
		mu.Unlock()
		if !errors.Is(err, builds.ErrUnavailable) {
			t.Errorf("sweep failed with %v; want Redis unavailability (builds.ErrUnavailable) only", err)
		}
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, err := a.Sweeper.SweepOnce(ctx); err != nil && ctx.Err() == nil {
				sweepFailed(err)
			}
			sleep(ctx, 20*time.Millisecond)
		}
	})

	// Mid-sweep: the unlocked half is done, the locked half waits.
	testenv.Eventually(t, time.Minute, "the unlocked half swept", func() bool { return processed() == n/2 })
	atRestart := processed()
	restartStart := time.Now()
	release, err := own.RestartLoading(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = release(context.Background()) }) // a failed test ends the hold too
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Redis is LOADING for as long as this takes. A sweep that finds candidates must fail on
	// their TTL check, keep whatever it could decide, and say Redis is unavailable. One that
	// finds none (the other replica's sweeper holds them just then) passes: try again until
	// one meets the candidates.
	var driven drivenSweep
	testenv.Eventually(t, 30*time.Second, "a driven sweep meets LOADING", func() bool {
		// Bounded: a sweeper that ignored the error would spin on the same batch until
		// Redis came back, and the test would only fail minutes later.
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		rep, err := a.Sweeper.SweepOnce(sctx)
		cancel()
		driven = drivenSweep{rep.Batches, rep.TimedOut, err}
		if err != nil {
			sweepFailed(err)
			return true
		}
		if rep.TimedOut > 0 {
			t.Errorf("sweep while Redis is LOADING failed %d builds whose ack keys it could not read", rep.TimedOut)
		}
		return false
	})
	if during := processed(); during != atRestart {
		t.Errorf("%d builds processed while Redis was LOADING, %d before: without ack keys nothing may be decided before the max wait", during, atRestart)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	outage := time.Since(restartStart)
	testenv.Eventually(t, time.Minute, "every build processed after Redis came back", func() bool { return processed() == n })
	finished := time.Since(restartStart)
	cancel()
	wg.Wait()

	timedOutOnce(t, a.Pool, ids)
	byStatus := invariants{RetryMax: 2}.check(t, a.Pool)
	bErrors := b.Metric(t, `jobapi_ack_sweeps_total{result="error"}`)
	t.Logf("%d expired acks: %d processed when Redis restarted; LOADING held for %v (driven sweep: %+v); all %d processed %v after the restart",
		n, atRestart, outage.Round(time.Millisecond), driven, n, finished.Round(time.Millisecond))
	t.Logf("failed sweeps: driven replica %d (%s), background replica %v; Redis errors seen by the replicas: %s | %s",
		len(sweepErr), strings.Join(sweepErr, ","), bErrors, a.RedisErrorKinds(t), b.RedisErrorKinds(t))
	t.Logf("builds: %s", statusLine(byStatus))
}

// drivenSweep is what the driven sweep that met Redis LOADING did, for the log.
type drivenSweep struct {
	Batches, TimedOut int
	Err               error
}

// Runners keep polling, acking and finishing while Redis restarts and LOADs: no answer is
// a 500, no job request a 403; what cannot be answered without Redis (a keep-alive) is a
// 503 with Retry-After; job requests are answered from Postgres. Redis stays LOADING until
// each of those has been seen (readiness 503, a LOADING error counted, a job handed out),
// so the assertions do not depend on how quickly it loads.
func TestRedisRestartUnderLoad(t *testing.T) {
	t.Parallel()
	const jobs = 300
	own := testenv.OwnRedis(t)
	fillForLoading(t, own)
	a := jobapitest.Start(t, jobapitest.Options{Sweeper: true,
		Configure: jobapitest.OnRedis(own, func(c *server.Config) { c.AckTTL = 10 * time.Second })})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := underLoad(ctx, t, a, jobs, 0.5)

	// The fault: Redis restarts and stays LOADING until what the test checks was seen.
	closeWindow := f.openWindow()
	restartStart := time.Now()
	probe := probeReadiness(a.URL, restartStart)
	release, err := own.RestartLoading(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = release(context.Background()) }) // a failed test ends the hold too
	testenv.Eventually(t, 30*time.Second, "LOADING seen by the replica and a job handed out while Redis LOADs", func() bool {
		return a.Metric(t, `jobapi_redis_errors_total{kind="loading"}`) > 0 && f.windowCount(epRequest, http.StatusCreated) > 0
	})
	probe.sawDown(t, "Redis LOADs")
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	redisBack := time.Since(restartStart)
	notReady, readyAgain := probe.wait(redisBack)
	during := closeWindow()
	waitFinished(t, a, 60*time.Second)
	cancel()
	f.wait()

	f.codes.noServerErrors(t)
	during.noServerErrors(t)
	if notReady == 0 || readyAgain == 0 {
		t.Errorf("readiness: 503 from %v to %v after the restart began; want 503 while Redis is LOADING, then 200", notReady, readyAgain)
	}
	f.checkNoDoubleAssignment(t)
	checkRefusedAcks(t, a, f)
	byStatus := invariants{RetryMax: 2, Done: true}.check(t, a.Pool)
	if byStatus["success"] != jobs {
		t.Errorf("builds: %s; want all %d jobs successful", statusLine(byStatus), jobs)
	}
	t.Logf("Redis restarted and was held LOADING for %v; readiness was 503 for %v (from %v to %v after the restart began)",
		redisBack.Round(time.Millisecond), (readyAgain - notReady).Round(time.Millisecond), notReady.Round(time.Millisecond), readyAgain.Round(time.Millisecond))
	t.Logf("answers while Redis was down or recovering: %s", during)
	t.Logf("all answers: %s; Redis errors: %s", &f.codes, a.RedisErrorKinds(t))
}

// readinessProbe polls a replica's readiness from the start of a fault on and remembers
// when it first saw 503 and, after that, 200 again.
type readinessProbe struct {
	down, up atomic.Int64 // time since start, 0 until seen
	over     atomic.Int64 // when the fault ended (since start), 0 while it lasts
	done     chan struct{}
}

func probeReadiness(baseURL string, start time.Time) *readinessProbe {
	p := &readinessProbe{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for time.Since(start) < 2*time.Minute {
			ok := ready(baseURL)
			at := int64(time.Since(start))
			switch {
			case !ok && p.down.Load() == 0:
				p.down.Store(at)
			case ok && p.down.Load() != 0:
				p.up.Store(at)
				return
			case ok && p.over.Load() != 0 && at > p.over.Load()+int64(2*time.Second):
				return // the fault is over and readiness never dropped
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return p
}

// sawDown waits, while the fault is held, until readiness answered 503.
func (p *readinessProbe) sawDown(t *testing.T, while string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "readiness 503 while "+while, func() bool { return p.down.Load() != 0 })
}

// wait, called once the fault is over (at `over` after start), waits until readiness is
// 200 again and returns when it went 503 and when it came back (0 for what it never saw).
func (p *readinessProbe) wait(over time.Duration) (down, up time.Duration) {
	p.over.Store(int64(over))
	<-p.done
	return time.Duration(p.down.Load()), time.Duration(p.up.Load())
}
