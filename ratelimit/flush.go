package ratelimit

import (
	"context"
	"fmt"
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
	// count is the key's count Redis answered, unless err.
	count int64
	err   error
}

// send adds every item's count in Redis, with countScript: one command for the whole
// batch; on a cluster client one per key, in one pipeline that the client splits by slot
// (a script may only touch the keys of one slot).
func (l *Limiter) send(ctx context.Context, batch []flushItem) error {
	if _, cluster := l.rdb.(*redis.ClusterClient); cluster {
		return l.sendPerKey(ctx, batch)
	}
	keys := make([]string, len(batch))
	args := make([]any, 0, 2*len(batch))
	for i := range batch {
		keys[i] = batch[i].key
		args = append(args, int64(batch[i].n), expiryOf(time.Duration(batch[i].e.window)*time.Millisecond))
	}
	counts, err := countScript.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err == nil && len(counts) != len(batch) {
		err = fmt.Errorf("rate limit flush: %d answers for %d keys", len(counts), len(batch))
	}
	for i := range batch {
		if err != nil {
			batch[i].err = err
		} else {
			batch[i].count = counts[i]
		}
	}
	return err
}

// sendPerKey is send on a cluster client. A node that lost its scripts (restarted, or
// failed over) answers NOSCRIPT: the script is loaded on every node and the keys it
// refused (and only those, so nothing counts twice) are sent once more.
func (l *Limiter) sendPerKey(ctx context.Context, batch []flushItem) error {
	todo := make([]int, len(batch))
	for i := range todo {
		todo[i] = i
	}
	var err error
	for try := 0; ; try++ {
		cmds := make([]*redis.Cmd, len(todo))
		_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k, i := range todo {
				cmds[k] = countScript.EvalSha(ctx, p, []string{batch[i].key}, int64(batch[i].n),
					expiryOf(time.Duration(batch[i].e.window)*time.Millisecond))
			}
			return nil
		})
		var again []int
		for k, i := range todo {
			counts, cerr := cmds[k].Int64Slice()
			if cerr == nil && len(counts) != 1 {
				cerr = fmt.Errorf("rate limit flush: %d answers for one key", len(counts))
			}
			batch[i].err = cerr
			if cerr == nil {
				batch[i].count = counts[0]
			} else if redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				again = append(again, i)
			}
		}
		if len(again) == 0 || try > 0 {
			return err
		}
		if lerr := loadEverywhere(ctx, l.rdb.(*redis.ClusterClient)); lerr != nil {
			return err
		}
		todo = again
	}
}

func loadEverywhere(ctx context.Context, c *redis.ClusterClient) error {
	return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		return countScript.Load(ctx, n).Err()
	})
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
	err := l.send(ctx, batch)

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
		if it.err == nil && it.count >= int64(it.n) {
			it.e.synced = max(it.e.synced, it.count)
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
