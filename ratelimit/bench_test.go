package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/testenv"
)

// BenchmarkAllow measures one request from many goroutines: local is a key far below half
// its budget (no Redis call), near-limit a key past half of it (one MULTI per request, as
// every request used to be), over-limit a key whose window is spent (refused locally).
func BenchmarkAllow(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "glrt-" + strconv.Itoa(i) + "-0123456789abcdefghij"
	}
	run := func(b *testing.B, l *Limiter, lim Limit, wantAllowed bool) {
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 97
			for pb.Next() {
				d, err := l.Allow(ctx, "jobs_request", keys[i%len(keys)], lim)
				if err != nil || d.Allowed != wantAllowed {
					b.Errorf("%+v %v", d, err)
					return
				}
				i++
			}
		})
	}

	b.Run("local", func(b *testing.B) {
		l := New(rdb, prefix+"local:")
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- l.Run(runCtx) }()
		run(b, l, Limit{Requests: 1 << 30, Window: time.Hour}, true)
		stop()
		<-done
	})
	b.Run("near-limit", func(b *testing.B) {
		// Past half the budget in Redis, and this replica knows it.
		l := New(rdb, prefix+"near:")
		lim := Limit{Requests: 1 << 30, Window: time.Hour}
		for _, k := range keys {
			if err := rdb.Set(ctx, windowKey(prefix+"near:", "jobs_request", k, time.Now().Truncate(time.Hour)), 1<<29, time.Hour).Err(); err != nil {
				b.Fatal(err)
			}
			_, _ = l.Allow(ctx, "jobs_request", k, lim)
		}
		if _, err := l.FlushOnce(ctx); err != nil {
			b.Fatal(err)
		}
		run(b, l, lim, true)
	})
	b.Run("over-limit", func(b *testing.B) {
		l := New(rdb, prefix+"over:")
		lim := Limit{Requests: 1, Window: time.Hour}
		for _, k := range keys {
			_, _ = l.Allow(ctx, "jobs_request", k, lim)
		}
		run(b, l, lim, false)
	})
}
