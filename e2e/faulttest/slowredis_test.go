package faulttest_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// statementCounter counts the statements of a replica's pool while on, and among them the
// claims (the statements that record an assignment).
type statementCounter struct {
	on     atomic.Bool
	n      atomic.Int64
	claims atomic.Int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if c.on.Load() {
		c.n.Add(1)
		if strings.Contains(d.SQL, "'assigned', $6") {
			c.claims.Add(1)
		}
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestSlowRedisPacesFallbackClaims: Redis answers every command later than the call timeout
// (slow, not down), so no job request can read the queue version. Before, every such poll
// claimed in Postgres on its own: a fleet's every poll became a claim. Now the claims of a
// runner profile answer the polls queued before them, a few a second: Postgres sees far
// fewer statements than there are polls, every job is handed out exactly once, and the
// runners see only what gitlab-runner retries without marking itself unhealthy (201, 204,
// 503 with Retry-After).
func TestSlowRedisPacesFallbackClaims(t *testing.T) {
	t.Parallel()
	const (
		runners = 60
		jobs    = 20
	)
	rdb, _ := testenv.Redis(t)
	proxy := testenv.StartProxy(t, rdb.Options().Addr)
	counter := &statementCounter{}
	a := jobapitest.Start(t, jobapitest.Options{Tracer: counter, Configure: func(c *server.Config) {
		c.RedisURL = proxy.URL(c.RedisURL)
		c.FallbackClaims = 2
		c.RateLimitJobsRequest = 0
	}})
	tokens := make([]string, runners)
	for i := range tokens {
		_, tokens[i] = a.CreateRunner(t)
	}

	proxy.SetLatency(900 * time.Millisecond) // the call timeout is 500 ms
	counter.on.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		polls    atomic.Int64
		mu       sync.Mutex
		handed   = map[int64]int{}
		statuses = map[string]int{}
		wg       sync.WaitGroup
	)
	for i, token := range tokens {
		c := runnerclient.New(a.URL, token, "s_slow"+strconv.Itoa(i))
		c.HTTP.Timeout = 30 * time.Second
		t.Cleanup(c.CloseIdleConnections)
		wg.Go(func() {
			for ctx.Err() == nil {
				polls.Add(1)
				job, res, err := c.RequestJob(ctx)
				if ctx.Err() != nil {
					return
				}
				class := strconv.Itoa(res.Code)
				switch {
				case err != nil:
					class = "transport: " + err.Error()
				case res.Code == http.StatusServiceUnavailable && res.Header.Get("Retry-After") == "":
					class = "503 without Retry-After"
				}
				mu.Lock()
				statuses[class]++
				if job != nil {
					handed[job.ID]++
				}
				mu.Unlock()
				if job != nil {
					if ur, err := c.UpdateJob(context.WithoutCancel(ctx), job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil || ur.Code != http.StatusOK {
						t.Errorf("finish job %d: %v (%d)", job.ID, err, ur.Code)
					}
				}
				sleep(ctx, 20*time.Millisecond)
			}
		})
	}

	var ids []int64
	for range jobs {
		p := a.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "slow", "stage": "test", "script": []string{"true"}})
		ids = append(ids, jobapitest.JobID(t, p, "slow"))
		time.Sleep(100 * time.Millisecond)
	}
	testenv.Eventually(t, time.Minute, "every job handed out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handed) == jobs
	})
	// Keep the fleet polling a while with nothing to take: the common case of an outage.
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()
	counter.on.Store(false)

	for id, n := range handed {
		if n != 1 {
			t.Errorf("build %d handed out %d times", id, n)
		}
	}
	for _, id := range ids {
		if handed[id] != 1 {
			t.Errorf("build %d handed out %d times, want once", id, handed[id])
		}
	}
	for class, n := range statuses {
		switch class {
		case "201", "204", "503":
		default:
			t.Errorf("%d job requests answered %s: gitlab-runner would not simply retry it", n, class)
		}
	}
	claims, answered, shed := a.Metric(t, "jobapi_fallback_claims_total"), a.Metric(t, "jobapi_fallback_answered_total"),
		a.Metric(t, "jobapi_shed_requests_total")
	perPoll := float64(counter.claims.Load()) / float64(polls.Load())
	t.Logf("%d polls, %d claims (%.2f a poll), %d statements in all, answers %v; fallback claims %v, answered by another's claim %v, shed %v",
		polls.Load(), counter.claims.Load(), perPoll, counter.n.Load(), statuses, claims, answered, shed)
	// Before, every poll that could not read the version was a claim of its own.
	if perPoll > 0.25 {
		t.Errorf("%.2f claims a poll while Redis is slow; want them paced (≤ 0.25)", perPoll)
	}
	if answered == 0 {
		t.Error("no poll was answered by a claim another poll ran")
	}
}
