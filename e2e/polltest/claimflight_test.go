package polltest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/testenv"
)

// The single-flight claim (builds/claimpacing/flights.go): after a bump, the polls of one runner
// profile on a replica wait for the claim of that profile already in flight at their
// version instead of each running their own.

// claimCounter counts a replica's claim statements (the candidate's SKIP LOCKED select
// over the runner's tags) and holds each one for delay, so that concurrent polls surely
// overlap it (the fault a loaded Postgres would bring).
type claimCounter struct {
	delay  time.Duration
	claims atomic.Int64
}

func isClaim(sql string) bool {
	return strings.Contains(sql, "SKIP LOCKED") && strings.Contains(sql, "tags")
}

func (c *claimCounter) observe(sql string) {
	if isClaim(sql) {
		c.claims.Add(1)
		time.Sleep(c.delay)
	}
}

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.observe(d.SQL)
	return ctx
}

// The store sends some statements as a pgx.Batch (a claim's lock with its BEGIN), which
// pgx traces through BatchTracer only.
func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		c.observe(q.SQL)
	}
	return ctx
}

func (c *claimCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pollAll sends one job request from each runner at once and returns the answers' codes
// (201 counted into taken).
func pollAll(t *testing.T, rs []*jobapitest.Runner, mu *sync.Mutex, taken map[int64]int) map[int]int {
	t.Helper()
	codes := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, r := range rs {
		wg.Go(func() {
			<-start
			job, res, err := r.RequestJob(context.Background())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("request job: %v", err)
			case job != nil:
				taken[job.ID]++
				codes[http.StatusCreated]++
			default:
				codes[res.Code]++
			}
		})
	}
	close(start)
	wg.Wait()
	return codes
}

// TestPollAfterBumpClaimsOnce: 20 runners of one profile on each of two replicas, their
// claims held 300 ms each. A bump for another profile: all 40 poll at once and get 204,
// with one claim statement per replica (without the single flight, one per poll). Then 12
// jobs for the profile at once: every one is handed out, none twice, and the polls that
// found nothing cost a claim per replica and version, not one each.
func TestPollAfterBumpClaimsOnce(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	counters := []*claimCounter{{delay: 300 * time.Millisecond}, {delay: 300 * time.Millisecond}}
	replicas := []*jobapitest.Instance{
		inst.Replica(t, jobapitest.Options{Tracer: counters[0]}),
		inst.Replica(t, jobapitest.Options{Tracer: counters[1]}),
	}
	var rs []*jobapitest.Runner
	for i := range 40 {
		_, token := inst.CreateRunner(t, "sf")
		rs = append(rs, jobapitest.NewRunner(t, replicas[i%2].URL, token, fmt.Sprintf("s_sf%d", i)))
	}
	// Each runner's first poll (no last_update yet) learns the version; the bumps of
	// the runners' creation are behind it.
	for _, r := range rs {
		r.NoJob(t)
	}
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "other", "stage": "test", "script": "x", "tags": []string{"nobody"}})
	before := []int64{counters[0].claims.Load(), counters[1].claims.Load()}
	var (
		mu    sync.Mutex
		taken = map[int64]int{}
	)
	codes := pollAll(t, rs, &mu, taken)
	if codes[http.StatusNoContent] != len(rs) {
		t.Fatalf("answers %v, want %d × 204", codes, len(rs))
	}
	for i, c := range counters {
		if n := c.claims.Load() - before[i]; n != 1 {
			t.Errorf("replica %d ran %d claim statements for 20 concurrent polls of one profile after a bump, want 1", i, n)
		}
	}

	// Jobs for the profile: the runners poll (each finishing what it gets) until all are
	// taken.
	want := map[int64]bool{}
	for k := range 12 {
		p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": fmt.Sprintf("sf-%d", k), "stage": "test", "script": "x", "tags": []string{"sf"}})
		want[p.Jobs[0].ID] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() { pollAndFinish(ctx, t, r, 20*time.Millisecond, &mu, taken) })
	}
	testenv.Eventually(t, time.Minute, "every job handed out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(taken) >= len(want)
	})
	cancel()
	wg.Wait()
	for id, n := range taken {
		if !want[id] || n != 1 {
			t.Errorf("job %d handed out %d times (one of the created: %v)", id, n, want[id])
		}
	}
}

// TestClaimFailureAnswersNoWaiter204: a replica whose Postgres goes away after a bump for
// a job its runners can take: their concurrent polls (the claim in flight fails) are not
// answered 204, which would carry the new version and leave them idle with the job
// pending; once Postgres is back, their next polls take the job.
func TestClaimFailureAnswersNoWaiter204(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	u, err := url.Parse(inst.Config.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, u.Host)
	conf := inst.Config
	conf.DatabaseURL = proxy.URL(inst.Config.DatabaseURL)
	cut := (&jobapitest.Instance{Config: conf}).Replica(t, jobapitest.Options{})
	var rs []*jobapitest.Runner
	for i := range 10 {
		_, token := inst.CreateRunner(t, "pg")
		rs = append(rs, jobapitest.NewRunner(t, cut.URL, token, fmt.Sprintf("s_pg%d", i)))
	}
	for _, r := range rs {
		r.NoJob(t)
	}
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "pg", "stage": "test", "script": "x", "tags": []string{"pg"}})
	proxy.Stop()
	var (
		mu    sync.Mutex
		taken = map[int64]int{}
	)
	codes := pollAll(t, rs, &mu, taken)
	if codes[http.StatusNoContent] != 0 || codes[http.StatusCreated] != 0 {
		t.Fatalf("answers with Postgres away %v, want no 204 (nor a job)", codes)
	}
	proxy.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range rs {
		// A 5xx while the pool reconnects is asked again.
		wg.Go(func() { pollAndFinishAsking(ctx, t, r, 20*time.Millisecond, &mu, taken, true) })
	}
	// Well within the version's TTL (a minute), the net under lost bumps.
	testenv.Eventually(t, 20*time.Second, "the job handed out once Postgres is back", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return taken[p.Jobs[0].ID] > 0
	})
	cancel()
	wg.Wait()
	if n := taken[p.Jobs[0].ID]; n != 1 || len(taken) != 1 {
		t.Errorf("taken %v, want job %d once", taken, p.Jobs[0].ID)
	}
}
