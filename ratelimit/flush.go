package ratelimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// flushTimeout bounds one send of every key's count: one pipeline, however many keys.
const flushTimeout = time.Second

// Run sends the counts decided locally every SyncInterval until ctx ends, then sends what
// is left once more and returns nil. Call it once per Limiter.
func (l *Limiter) Run(ctx context.Context) error {
	interval := l.SyncInterval
	if interval <= 0 {
		interval = DefaultSyncInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			// Other replicas should see this one's last requests; Redis may already be
			// closing, so this is best effort.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			_, _ = l.FlushOnce(fctx)
			cancel()
			return nil
		case <-t.C:
		}
		_, err := l.FlushOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil && !failing:
			failing = true
			if l.Log != nil {
				l.Log.Warn("rate limit counts not reaching Redis; replicas count apart until it recovers", "error", err)
			}
		case err == nil && failing:
			failing = false
			if l.Log != nil {
				l.Log.Info("rate limit counts reach Redis again")
			}
		}
	}
}

// flushItem is one key's count on its way to Redis.
type flushItem struct {
	key   string
	e     *entry
	shard int
	n     int32
	gone  bool // dropped from its shard: a failed send is not retried
	incr  *redis.IntCmd
}

// FlushOnce sends every key's pending count in one pipeline and drops the entries of
// windows that ended over a second ago. It returns how many keys it sent. On an error the
// counts that did not make it stay pending for the next call.
func (l *Limiter) FlushOnce(ctx context.Context) (int, error) {
	now := l.now().UnixMilli()
	// Ended windows are looked for once per expiryMargin, not on every flush.
	expire := false
	if last := l.lastExpiry.Load(); now-last >= expiryMargin.Milliseconds() {
		expire = l.lastExpiry.CompareAndSwap(last, now)
	}
	var batch []flushItem
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		if expire {
			for k, e := range sh.m {
				// A second of grace: a request that read the clock just before the window
				// ended must still find the window's entry.
				if now >= e.reset+expiryMargin.Milliseconds() {
					delete(sh.m, k)
					e.gone = true
				}
			}
		}
		for _, e := range sh.dirty {
			e.dirty = false
			if e.pending == 0 {
				continue
			}
			batch = append(batch, flushItem{key: e.key, e: e, shard: i, n: e.pending, gone: e.gone})
			e.sending += e.pending
			e.pending = 0
		}
		clear(sh.dirty)
		sh.dirty = sh.dirty[:0]
		sh.mu.Unlock()
	}
	if len(batch) == 0 {
		return 0, nil
	}

	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range batch {
			it := &batch[i]
			it.incr = p.IncrBy(ctx, it.key, int64(it.n))
			p.PExpire(ctx, it.key, time.Duration(it.e.window)*time.Millisecond+expiryMargin)
		}
		return nil
	})

	// A cluster client may have sent some slots and not others: judge each key by its own
	// answer. A count lower than what was added means the command never ran.
	sent := 0
	locked := -1
	for i := range batch {
		it := &batch[i]
		if it.shard != locked {
			if locked >= 0 {
				l.shards[locked].mu.Unlock()
			}
			locked = it.shard
			l.shards[locked].mu.Lock()
		}
		it.e.sending -= it.n
		if it.incr.Err() == nil && it.incr.Val() >= int64(it.n) {
			it.e.synced = max(it.e.synced, it.incr.Val())
			sent++
		} else if !it.gone {
			it.e.pending += it.n
			l.shards[locked].markDirty(it.e)
		}
	}
	l.shards[locked].mu.Unlock()
	return sent, err
}

// entries is how many window keys the limiter holds (tests).
func (l *Limiter) entries() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].m)
		l.shards[i].mu.Unlock()
	}
	return n
}
