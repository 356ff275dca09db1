package faulttest_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

// fleet is a set of two-phase runners polling one or more replicas, the way gitlab-runner
// does: request, then ack (state=running) and finish (state=success); some runners drop the
// job (never ack, as when a VM never boots), some ack only after the build timed out.
// Every answer is counted by endpoint and status.
type fleet struct {
	t     *testing.T
	pool  *pgxpool.Pool // to read build states for late acks
	codes codes

	// Behaviour, as probabilities per assigned job.
	Drop, Late, Keepalive float64
	// Idle is the pause after a 204 (and, capped by Retry-After, after a 503 or 429).
	Idle time.Duration

	mu       sync.Mutex
	assigned map[int64]int // job id → number of 201s that handed it out
	dropped  []int64
	// lateAcks counts late acks by answer: "403 failed" is right, anything else a bug.
	lateAcks map[string]int
	// ackForbidden lists builds whose prompt ack was refused (legitimate only if the build
	// had timed out meanwhile, which the invariant check decides).
	ackForbidden []int64

	// window, while set, counts the answers of a fault's duration on their own.
	window  atomic.Pointer[codes]
	late    sync.WaitGroup
	runners sync.WaitGroup
}

func newFleet(t *testing.T, pool *pgxpool.Pool) *fleet {
	return &fleet{t: t, pool: pool, Idle: 20 * time.Millisecond, assigned: map[int64]int{}, lateAcks: map[string]int{}}
}

// start runs n runners until ctx ends. Each runner is registered on the first replica and
// sends its requests round-robin to every replica in insts.
func (f *fleet) start(ctx context.Context, n int, insts ...*jobapitest.Instance) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		_, token := insts[0].CreateRunner(f.t)
		clients := make([]*runnerclient.Client, len(insts))
		for j, inst := range insts {
			c := runnerclient.New(inst.URL, token, "s_fleet"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			c.Info.Features.TwoPhaseJobCommit = true
			c.HTTP.Timeout = 20 * time.Second
			clients[j] = c
			f.t.Cleanup(c.CloseIdleConnections)
		}
		f.runners.Go(func() { f.run(ctx, clients, int64(i)) })
	}
}

// wait stops waiting for the runners (ctx must have ended) and their late acks.
func (f *fleet) wait() {
	f.runners.Wait()
	f.late.Wait()
}

func (f *fleet) run(ctx context.Context, clients []*runnerclient.Client, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 42))
	for turn := 0; ctx.Err() == nil; turn++ {
		c := clients[turn%len(clients)]
		start := time.Now()
		job, res, err := c.RequestJob(ctx)
		if ctx.Err() != nil {
			return
		}
		f.add(epRequest, res.Code, res.Header, time.Since(start))
		switch {
		case err == nil && res.Code == http.StatusCreated:
			f.mu.Lock()
			f.assigned[job.ID]++
			f.mu.Unlock()
			f.handle(ctx, c, job, rng)
		case res.Code == http.StatusNoContent:
			sleep(ctx, f.Idle)
		default:
			// 503, 429, 409 or no answer: back off a little, as gitlab-runner does.
			sleep(ctx, 2*f.Idle)
		}
	}
}

func (f *fleet) handle(ctx context.Context, c *runnerclient.Client, job *runnerclient.Job, rng *rand.Rand) {
	p := rng.Float64()
	switch {
	case p < f.Drop:
		f.mu.Lock()
		f.dropped = append(f.dropped, job.ID)
		f.mu.Unlock()
		return
	case p < f.Drop+f.Late:
		f.late.Go(func() { f.lateAck(ctx, c, job) })
		return
	}
	if rng.Float64() < f.Keepalive {
		start := time.Now()
		res, err := c.Keepalive(ctx, job)
		if err != nil {
			return
		}
		f.add(epKeepalive, res.Code, res.Header, time.Since(start))
	}
	if code := f.put(ctx, c, job, runnerclient.StateRunning, epAck); code == http.StatusForbidden {
		f.mu.Lock()
		f.ackForbidden = append(f.ackForbidden, job.ID)
		f.mu.Unlock()
		return
	} else if code != http.StatusOK {
		return
	}
	f.put(ctx, c, job, runnerclient.StateSuccess, epFinish)
}

// put sends one update, retrying 503s, 429s and lost answers like gitlab-runner's update
// loop, and returns the final status (0 if ctx ended first).
func (f *fleet) put(ctx context.Context, c *runnerclient.Client, job *runnerclient.Job, state, ep string) int {
	for ctx.Err() == nil {
		start := time.Now()
		res, err := c.UpdateJob(ctx, job, state, runnerclient.UpdateOptions{})
		if ctx.Err() != nil {
			return 0
		}
		f.add(ep, res.Code, res.Header, time.Since(start))
		if err == nil && res.Code != http.StatusServiceUnavailable && res.Code != http.StatusTooManyRequests && res.Code < 500 {
			return res.Code
		}
		sleep(ctx, 2*f.Idle)
	}
	return 0
}

// lateAck waits until the sweeper failed the build, then acks it: the runner must be told
// 403 with Job-Status failed (SPEC §4), which makes gitlab-runner abort.
func (f *fleet) lateAck(ctx context.Context, c *runnerclient.Client, job *runnerclient.Job) {
	for {
		var status string
		err := f.pool.QueryRow(ctx, "SELECT status FROM builds WHERE id = $1", job.ID).Scan(&status)
		if ctx.Err() != nil {
			return
		}
		if err == nil && status != "waiting_for_runner_ack" {
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	for ctx.Err() == nil {
		start := time.Now()
		res, err := c.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if ctx.Err() != nil {
			return
		}
		f.add(epLateAck, res.Code, res.Header, time.Since(start))
		if err != nil || res.Code == http.StatusServiceUnavailable || res.Code == http.StatusTooManyRequests {
			sleep(ctx, 2*f.Idle)
			continue
		}
		key := "other"
		if res.Code == http.StatusForbidden && res.JobStatus == "failed" && res.State == runnerclient.UpdateAbort {
			key = "403 failed"
		}
		f.mu.Lock()
		f.lateAcks[key]++
		f.mu.Unlock()
		if key == "other" {
			f.t.Errorf("late ack of build %d: %d Job-Status %q (runner reads %v), want 403 failed", job.ID, res.Code, res.JobStatus, res.State)
		}
		return
	}
}

// add counts one answer, in the fault window too while one is open.
func (f *fleet) add(ep string, code int, h http.Header, took time.Duration) {
	f.codes.add(ep, code, h, took)
	if w := f.window.Load(); w != nil {
		w.add(ep, code, h, took)
	}
}

// openWindow starts counting answers on their own; the returned func closes the window
// and returns what it counted.
func (f *fleet) openWindow() func() *codes {
	w := &codes{}
	f.window.Store(w)
	return func() *codes {
		f.window.CompareAndSwap(w, nil)
		return w
	}
}

// underLoad is the common start of the "backend restarts under load" tests: jobs two-phase
// jobs in two pipelines of project 1, eight runners working on a until ctx ends (keepalive is
// the share of assignments kept alive before the ack), and a fifth of the jobs done.
func underLoad(ctx context.Context, t *testing.T, a *jobapitest.Instance, jobs int, keepalive float64) *fleet {
	t.Helper()
	a.EnableTwoPhase(t, 1)
	for p := 0; p < 2; p++ {
		defs := make([]jobapitest.Job, jobs/2)
		for i := range defs {
			defs[i] = jobapitest.Job{"name": "job" + string(rune('a'+i%26)) + string(rune('a'+i/26)), "stage": "test", "script": []string{"true"}}
		}
		a.CreatePipeline(t, 1, []string{"test"}, defs...)
	}

	f := newFleet(t, a.Pool)
	f.Keepalive = keepalive
	f.start(ctx, 8, a)
	testenv.Eventually(t, time.Minute, "a fifth of the jobs done before the fault", func() bool {
		return jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM builds WHERE status = 'success'") >= jobs/5
	})
	return f
}

// windowCount is how many answers of code the open window has counted for endpoint.
func (f *fleet) windowCount(endpoint string, code int) int {
	if w := f.window.Load(); w != nil {
		return w.get(endpoint, code)
	}
	return 0
}

// checkNoDoubleAssignment fails the test if any job was handed out by two 201s.
func (f *fleet) checkNoDoubleAssignment(t *testing.T) int {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, n := range f.assigned {
		if n > 1 {
			t.Errorf("build %d handed out %d times", id, n)
		}
	}
	return len(f.assigned)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
