package polltest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// TestFleetWarmUpHeldInTheHub: a fleet that comes at once (a replica starts, a deploy
// moves every runner) on a healthy Redis is held by the long poll, none of it by the
// fallback, which is for a Redis that does not answer (docs/overload.md). Redis answers
// every command in 20 ms (healthy, across a zone) through a pool of 4 connections: with a
// GET of the queue version per job request, 200 requests at once queued a second for
// the pool, most failed at the call's 500 ms deadline and were held by the fallback, each
// claiming or waiting on a claim in Postgres. The version reads are coalesced now
// (redisstore's versionReads): every first poll and every poll after it reads the version.
func TestFleetWarmUpHeldInTheHub(t *testing.T) {
	t.Parallel()
	const runners = 200
	inst := jobapitest.Start(t, jobapitest.Options{})
	proxy := testenv.StartProxy(t, redisAddr(t, inst.Config.RedisURL))
	held := inst.Replica(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.LongPoll = jobapitest.LongPollHold
		c.RedisURL = withPoolSize(t, proxy.URL(c.RedisURL), 4)
		c.RateLimitJobsRequest = 0 // the limiter's own Redis calls are not what this is about
	}})
	fleet := make([]*jobapitest.Runner, runners)
	for i := range fleet {
		_, token := inst.CreateRunner(t)
		fleet[i] = jobapitest.NewRunner(t, held.URL, token, fmt.Sprintf("s_warm%d", i))
	}
	proxy.SetLatency(20 * time.Millisecond)

	// Every runner's first request at once: each reads the version (and goes to Postgres:
	// its runner has no last_update yet).
	var wg sync.WaitGroup
	for _, r := range fleet {
		wg.Go(func() {
			if job, res, err := r.RequestJob(context.Background()); err != nil || job != nil || res.Code != http.StatusNoContent {
				t.Errorf("first request: status %d, job %v, err %v; want 204", res.Code, job != nil, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Then every runner's next request at once: each is held by the long poll.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range fleet {
		jobapitest.StartPoller(t, ctx, r)
	}
	held.WaitHeld(t, runners)
	if fb := held.Service.FallbackStats(); fb != (claimpacing.FallbackStats{}) {
		t.Errorf("fallback %+v, want nothing on a healthy Redis: every request read the queue version", fb)
	}
}

// redisAddr is the host:port of a redis:// URL.
func redisAddr(t *testing.T, redisURL string) string {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// withPoolSize sets go-redis's pool_size on a redis:// URL.
func withPoolSize(t *testing.T, redisURL string, n int) string {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_size", fmt.Sprint(n))
	u.RawQuery = q.Encode()
	return u.String()
}
