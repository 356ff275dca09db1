package ratelimit

import (
	"context"
	"sync"
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
	l.now = func() time.Time { return now }
	lim := Limit{Requests: 3, Window: time.Minute}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := l.Allow(ctx, "jobs", "token-a", lim)
		if err != nil {
			t.Fatal(err)
		}
		if want := i <= 3; d.Allowed != want || d.Remaining != max(3-i, 0) || !d.Reset.Equal(now.Add(time.Minute)) {
			t.Fatalf("request %d: %+v, want allowed=%t remaining=%d reset=%v", i, d, want, max(3-i, 0), now.Add(time.Minute))
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

// Two limiters (two replicas) share one budget.
func TestAllowSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	a, b := New(rdb, prefix), New(rdb, prefix)
	lim := Limit{Requests: 50, Window: time.Hour}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(l *Limiter) {
			defer wg.Done()
			d, err := l.Allow(context.Background(), "jobs", "shared", lim)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}([]*Limiter{a, b}[i%2])
	}
	wg.Wait()
	if allowed != 50 {
		t.Errorf("allowed %d of 100 across two replicas, want exactly 50", allowed)
	}
}

func TestAllowFailsOpen(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer dead.Close()
	d, err := New(dead, "x:").Allow(context.Background(), "jobs", "k", Limit{Requests: 1, Window: time.Minute})
	if err == nil || !d.Allowed {
		t.Errorf("Redis down: %+v, %v; want an error and an allowing decision", d, err)
	}
}
