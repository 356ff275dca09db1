package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/testenv"
)

// getCounter counts the GETs a client sends.
type getCounter struct{ n atomic.Int64 }

func (c *getCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *getCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *getCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "get" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestVersionConcurrentReadsOnASmallPool: a fleet's job requests read the queue version
// together. Redis answers each command in 20 ms (healthy, across a zone) through a pool of
// 2 connections: one GET per request would queue 1,000 reads for the pool, 10 s of them,
// and most would fail at the call's 500 ms deadline. Coalesced, every one gets the version
// in a few reads.
func TestVersionConcurrentReadsOnASmallPool(t *testing.T) {
	t.Parallel()
	shared, prefix := testenv.Redis(t)
	proxy := testenv.StartProxy(t, shared.Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 2})
	t.Cleanup(func() { _ = rdb.Close() })
	gets := &getCounter{}
	rdb.AddHook(gets)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	want, err := s.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(20 * time.Millisecond)
	gets.n.Store(0)

	const callers = 1000
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	for range callers {
		wg.Go(func() {
			v, err := s.Version(ctx)
			if err != nil {
				failed.Add(1)
				return
			}
			if v != want {
				t.Errorf("version %q, want %q", v, want)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d version reads failed on a healthy Redis", n, callers)
	}
	// One read at a time: 20 ms each, the callers come within a few of them.
	if n := gets.n.Load(); n > 50 {
		t.Errorf("%d GETs for %d concurrent callers, want them coalesced (≤ 50)", n, callers)
	}
	t.Logf("%d GETs for %d callers", gets.n.Load(), callers)
}
