package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestAllowCountsPerKeyAndWindow(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := New(rdb, prefix)
	l.Now = func() time.Time { return now }
	lim := Limit{Requests: 3, Window: time.Minute}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := l.Allow(ctx, "jobs", "token-a", lim)
		if err != nil {
			t.Fatal(err)
		}
		if want := i <= 3; d.Allowed != want || d.Remaining != max(3-i, 0) || !d.Reset.Equal(now.Add(time.Minute)) || d.RetryAfter != time.Minute {
			t.Fatalf("request %d: %+v, want allowed=%t remaining=%d reset=%v, a minute after the limiter's now", i, d, want, max(3-i, 0), now.Add(time.Minute))
		}
	}
	if d, _ := l.Allow(ctx, "jobs", "token-b", lim); !d.Allowed {
		t.Error("another key must have its own budget")
	}
	now = now.Add(time.Minute)
	if d, _ := l.Allow(ctx, "jobs", "token-a", lim); !d.Allowed || d.Remaining != 2 {
		t.Errorf("next window: %+v, want a fresh budget", d)
	}
}

// Two limiters (two replicas) share one budget. From a cold key each may spend its half
// locally before the other's count reaches Redis: this used to be exactly 50, it is now
// between the limit and the documented ceiling Requests + R×(Requests/2).
func TestAllowSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	a, b := New(rdb, prefix), New(rdb, prefix)
	// 100 requests at once on a loaded -race machine can wait longer than the default for a
	// connection; this test is about counting, and a timeout would fail open.
	a.CallTimeout, b.CallTimeout = 10*time.Second, 10*time.Second
	lim := Limit{Requests: 50, Window: time.Hour}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		l := []*Limiter{a, b}[i%2]
		wg.Go(func() {
			d, err := l.Allow(context.Background(), "jobs", "shared", lim)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n < 50 || n > 50+2*25 {
		t.Errorf("allowed %d of 100 across two replicas, want 50 to %d", n, 50+2*25)
	}
}

// Once both replicas have seen the count at half the budget, every request is decided in
// Redis and the two together admit exactly the limit.
func TestReplicasNearLimitAdmitExactlyTheLimit(t *testing.T) {
	t.Parallel()
	for _, requests := range []int{2, 3, 20, 101} {
		t.Run(strconv.Itoa(requests), func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			ctx := context.Background()
			a, b := New(rdb, prefix), New(rdb, prefix)
			a.SyncInterval, b.SyncInterval = time.Millisecond, time.Millisecond
			// A call timed out on a loaded machine fails open and breaks the exact count.
			a.CallTimeout, b.CallTimeout = 10*time.Second, 10*time.Second
			lim := Limit{Requests: requests, Window: time.Hour}
			half := requests / 2

			// Warm up: a spends its half locally, b one request; both send and learn.
			admitted := 0
			for range half {
				if d, err := a.Allow(ctx, "jobs", "k", lim); err != nil || !d.Allowed {
					t.Fatalf("warm-up on a: %+v %v", d, err)
				}
				admitted++
			}
			if _, err := a.FlushOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if d, err := b.Allow(ctx, "jobs", "k", lim); err != nil || !d.Allowed {
				t.Fatalf("first request on b: %+v %v", d, err)
			}
			admitted++
			if _, err := b.FlushOnce(ctx); err != nil {
				t.Fatal(err)
			}

			runCtx, stop := context.WithCancel(ctx)
			var runs sync.WaitGroup
			runs.Go(func() { _ = a.Run(runCtx) })
			runs.Go(func() { _ = b.Run(runCtx) })
			var storm atomic.Int64
			var wg sync.WaitGroup
			for g := range 16 {
				l := []*Limiter{a, b}[g%2]
				wg.Go(func() {
					for range 2 * requests {
						d, err := l.Allow(ctx, "jobs", "k", lim)
						if err != nil {
							t.Error(err)
						}
						if d.Allowed {
							storm.Add(1)
						}
					}
				})
			}
			wg.Wait()
			stop()
			runs.Wait()
			if got := admitted + int(storm.Load()); got != requests {
				t.Errorf("admitted %d across two replicas near the limit, want exactly %d", got, requests)
			}
		})
	}
}

// A cold key hit hard on two replicas with their flushers running: never fewer than the
// limit, never more than the documented ceiling, and every admitted request reaches Redis.
func TestReplicasColdStormStaysWithinBound(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	const requests, replicas = 100, 3
	lim := Limit{Requests: requests, Window: time.Hour}
	runCtx, stop := context.WithCancel(ctx)
	var runs sync.WaitGroup
	var ls []*Limiter
	for range replicas {
		l := New(rdb, prefix)
		l.SyncInterval = time.Millisecond
		l.CallTimeout = 10 * time.Second // a timeout would fail open: not what this counts
		ls = append(ls, l)
		runs.Go(func() { _ = l.Run(runCtx) })
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 * replicas {
		l := ls[g%replicas]
		wg.Go(func() {
			for range 50 {
				d, err := l.Allow(ctx, "jobs", "cold", lim)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	stop()
	runs.Wait()
	if n, ceiling := allowed.Load(), int64(requests+replicas*(requests/2)); n < requests || n > ceiling {
		t.Errorf("admitted %d, want %d to %d", n, requests, ceiling)
	}
	for _, l := range ls {
		if n := l.pendingTotal(); n != 0 {
			t.Errorf("a replica still holds %d unsent requests after Run returned", n)
		}
	}
	if got := getInt(t, rdb, windowKey(prefix, "jobs", "cold", time.Now().Truncate(time.Hour))); got < allowed.Load() {
		t.Errorf("count in Redis %d, below the %d requests admitted", got, allowed.Load())
	}
}

// While a key is below half its budget no request touches Redis; the flush sends the
// count in one pipeline, and the next request near the limit is decided from it.
func TestLocalDecisionsMakeNoRedisCall(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	hook := &faultHook{}
	rdb.AddHook(hook)
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	l := New(rdb, prefix)
	l.Now = func() time.Time { return now }
	lim := Limit{Requests: 10, Window: time.Minute}
	key := windowKey(prefix, "jobs", "token", now.Truncate(time.Minute))

	for i := 1; i <= 5; i++ {
		d, err := l.Allow(ctx, "jobs", "token", lim)
		if err != nil || !d.Allowed || d.Remaining != 10-i || !d.Reset.Equal(now.Truncate(time.Minute).Add(time.Minute)) {
			t.Fatalf("request %d: %+v %v, want allowed with %d remaining", i, d, err, 10-i)
		}
	}
	if n := hook.cmds.Load(); n != 0 {
		t.Fatalf("%d Redis commands for 5 requests below half the budget, want none", n)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("key %s exists=%d (%v) before the flush, want it absent", key, n, err)
	}

	// Redis has the script cached, as it has after the first call (EVALSHA answered
	// NOSCRIPT is followed by an EVAL).
	if err := countScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	hook.cmds.Store(0)
	hook.pipelines.Store(0)
	if n, err := l.FlushOnce(ctx); err != nil || n != 1 {
		t.Fatalf("flush: %d keys, %v; want 1", n, err)
	}
	if p, n := hook.pipelines.Load(), hook.cmds.Load(); p != 0 || n != 1 {
		t.Errorf("flush used %d pipelines, %d commands; want 1 command: the count script", p, n)
	}
	if got := getInt(t, rdb, key); got != 5 {
		t.Errorf("count after the flush %d, want 5", got)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= time.Minute || ttl > time.Minute+time.Second {
		t.Errorf("key expires in %v, want the window plus a second", ttl)
	}
	if n, err := l.FlushOnce(ctx); err != nil || n != 0 {
		t.Errorf("second flush sent %d keys (%v), want none: nothing is pending", n, err)
	}

	// Past half the budget every request is decided in Redis, exactly.
	for i := 6; i <= 10; i++ {
		d, err := l.Allow(ctx, "jobs", "token", lim)
		if err != nil || !d.Allowed || d.Remaining != 10-i {
			t.Fatalf("request %d: %+v %v, want allowed with %d remaining", i, d, err, 10-i)
		}
	}
	if got := getInt(t, rdb, key); got != 10 {
		t.Errorf("count %d, want 10", got)
	}
	// Over the limit the answer is known without asking: a window's count never goes down.
	hook.cmds.Store(0)
	if d, err := l.Allow(ctx, "jobs", "token", lim); err != nil || d.Allowed || d.Remaining != 0 {
		t.Errorf("over the limit: %+v %v, want refused", d, err)
	}
	if n := hook.cmds.Load(); n != 0 {
		t.Errorf("%d Redis commands for a request over the limit, want none", n)
	}
}

// A send that fails keeps the counts; the next one delivers them.
func TestFlushFailureKeepsCounts(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	hook := &faultHook{}
	rdb.AddHook(hook)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := New(rdb, prefix)
	l.Now = func() time.Time { return now }
	lim := Limit{Requests: 100, Window: time.Minute}
	for range 7 {
		if _, err := l.Allow(ctx, "jobs", "a", lim); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Allow(ctx, "updates", "b", lim); err != nil {
		t.Fatal(err)
	}

	hook.fail.Store(true)
	for range 3 {
		if n, err := l.FlushOnce(ctx); err == nil || n != 0 {
			t.Fatalf("flush with Redis failing: %d keys, %v; want an error", n, err)
		}
	}
	keyA := windowKey(prefix, "jobs", "a", now)
	if n := rdb.Exists(ctx, keyA).Val(); n != 0 {
		t.Fatal("the failed flush wrote a count")
	}
	// Requests go on being decided locally meanwhile, on top of the kept counts.
	if d, err := l.Allow(ctx, "jobs", "a", lim); err != nil || d.Remaining != 100-8 {
		t.Fatalf("during the outage: %+v %v, want 92 remaining", d, err)
	}

	hook.fail.Store(false)
	if n, err := l.FlushOnce(ctx); err != nil || n != 2 {
		t.Fatalf("flush after recovery: %d keys, %v; want 2", n, err)
	}
	if got := getInt(t, rdb, keyA); got != 8 {
		t.Errorf("count of a %d, want 8 (7 kept through the outage and 1 after)", got)
	}
	if got := getInt(t, rdb, windowKey(prefix, "updates", "b", now)); got != 1 {
		t.Errorf("count of b %d, want 1", got)
	}
}

// Run keeps retrying through an outage, logging when it starts and when it ends only.
func TestRunRetriesUntilRedisRecovers(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	hook := &faultHook{}
	hook.fail.Store(true)
	rdb.AddHook(hook)
	logs := &testenv.Buffer{}
	l := New(rdb, prefix)
	l.SyncInterval = 5 * time.Millisecond
	l.Log = slog.New(slog.NewTextHandler(logs, nil))
	lim := Limit{Requests: 100, Window: time.Hour}
	key := windowKey(prefix, "jobs", "a", time.Now().Truncate(time.Hour))
	for range 4 {
		_, _ = l.Allow(ctx, "jobs", "a", lim)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for hook.failed.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	hook.fail.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Get(ctx, key).Val() != "4" || !strings.Contains(logs.String(), "again") {
		if time.Now().After(deadline) {
			t.Fatalf("count %q after recovery, want 4; log:\n%s", rdb.Get(ctx, key).Val(), logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Errorf("%d log lines, want 2 (failing, recovered) however many ticks and keys:\n%s", n, logs)
	}
}

// A new window starts a fresh budget; entries of ended windows are sent, then dropped.
func TestWindowsRollOverAndOldEntriesAreDropped(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	clock := func(d time.Duration) time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
		return now
	}
	l := New(rdb, prefix)
	l.Now = func() time.Time { return clock(0) }
	lim := Limit{Requests: 10, Window: time.Minute}
	w1 := clock(0).Truncate(time.Minute)
	w2 := w1.Add(time.Minute)
	for range 3 {
		_, _ = l.Allow(ctx, "jobs", "a", lim)
	}
	_, _ = l.Allow(ctx, "jobs", "b", lim)

	clock(30*time.Second + 200*time.Millisecond) // 12:01:00.2, window 2
	if d, _ := l.Allow(ctx, "jobs", "a", lim); !d.Allowed || d.Remaining != 9 || !d.Reset.Equal(w2.Add(time.Minute)) {
		t.Errorf("new window: %+v, want a fresh budget", d)
	}
	if n, err := l.FlushOnce(ctx); err != nil || n != 3 {
		t.Fatalf("flush: %d keys, %v; want 3", n, err)
	}
	if n := l.entries(); n != 3 {
		t.Errorf("%d entries, want 3: an ended window is kept a second, for requests that read the clock before it ended", n)
	}
	if got := getInt(t, rdb, windowKey(prefix, "jobs", "a", w1)); got != 3 {
		t.Errorf("window 1 of a: %d, want 3", got)
	}
	if got := getInt(t, rdb, windowKey(prefix, "jobs", "a", w2)); got != 1 {
		t.Errorf("window 2 of a: %d, want 1", got)
	}

	clock(time.Second)
	if n, err := l.FlushOnce(ctx); err != nil || n != 0 {
		t.Fatalf("flush: %d keys, %v; want none", n, err)
	}
	if n := l.entries(); n != 1 {
		t.Errorf("%d entries, want 1: window 1 is over", n)
	}

	// An ended window's last count is still sent when its entry is dropped.
	_, _ = l.Allow(ctx, "jobs", "b", lim)
	_, _ = l.Allow(ctx, "jobs", "b", lim)
	clock(10 * time.Minute)
	if n, err := l.FlushOnce(ctx); err != nil || n != 1 {
		t.Fatalf("flush: %d keys, %v; want 1", n, err)
	}
	if n := l.entries(); n != 0 {
		t.Errorf("%d entries long after every window ended, want none", n)
	}
	if got := getInt(t, rdb, windowKey(prefix, "jobs", "b", w2)); got != 2 {
		t.Errorf("window 2 of b: %d, want 2", got)
	}
}

func TestAllowFailsOpen(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer dead.Close()
	ctx := context.Background()
	d, err := New(dead, "x:").Allow(ctx, "jobs", "k", Limit{Requests: 1, Window: time.Minute})
	if err == nil || !d.Allowed {
		t.Errorf("Redis down: %+v, %v; want an error and an allowing decision", d, err)
	}

	// Below half the budget the outage goes unnoticed; past it, it fails open with the error.
	l := New(dead, "x:")
	lim := Limit{Requests: 4, Window: time.Minute}
	for i := 1; i <= 4; i++ {
		d, err := l.Allow(ctx, "jobs", "k", lim)
		if wantErr := i > 2; (err != nil) != wantErr || !d.Allowed {
			t.Errorf("request %d with Redis down: %+v, %v; want allowed, error=%t", i, d, err, wantErr)
		}
	}
	if n, err := l.FlushOnce(ctx); err == nil || n != 0 {
		t.Errorf("flush with Redis down: %d, %v; want an error", n, err)
	}
	if n := l.pendingTotal(); n != 2 {
		t.Errorf("%d requests kept for the next flush, want the 2 admitted locally", n)
	}
}

// faultHook counts the commands that reach Redis and, while fail is set, fails them. The
// handshake of a new connection (HELLO, CLIENT) is not counted.
type faultHook struct {
	fail      atomic.Bool
	cmds      atomic.Int64
	pipelines atomic.Int64
	failed    atomic.Int64 // calls (a command or a pipeline) failed while fail was set
}

var errInjected = errors.New("injected Redis fault")

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake(cmd) {
			return next(ctx, cmd)
		}
		if h.fail.Load() {
			h.failed.Add(1)
			cmd.SetErr(errInjected)
			return errInjected
		}
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && handshake(cmds[0]) {
			return next(ctx, cmds)
		}
		h.pipelines.Add(1)
		if h.fail.Load() {
			h.failed.Add(1)
			return errInjected // as a lost connection would, before any command ran
		}
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func handshake(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

// windowKey spells the key format out: Redis Cluster needs the hash in braces.
func windowKey(prefix, scope, key string, window time.Time) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + "rl:" + scope + ":{" + hex.EncodeToString(sum[:12]) + "}:" + strconv.FormatInt(window.UnixMilli(), 36)
}

func getInt(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	n, err := rdb.Get(context.Background(), key).Int64()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return n
}

// pendingTotal is how many admitted requests the limiter has not sent (tests).
func (l *Limiter) pendingTotal() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		for _, e := range l.shards[i].m {
			n += int(e.pending + e.sending)
		}
		l.shards[i].mu.Unlock()
	}
	return n
}
