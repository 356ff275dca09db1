package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limit is a number of requests per window.
type Limit struct {
	Requests int
	Window   time.Duration
}

// Decision is the outcome for one request.
type Decision struct {
	Allowed   bool
	Limit     int
	Remaining int
	// Reset is when the current window ends; RetryAfter is the time until then, by the
	// limiter's clock.
	Reset      time.Time
	RetryAfter time.Duration
}

// DefaultSyncInterval is how often Run sends local counts when SyncInterval is zero.
const DefaultSyncInterval = 100 * time.Millisecond

// Limiter is a fixed-window counter in Redis, decided locally while a key is below half its
// budget (see the package comment). Run must be running for other replicas to see the
// requests this one decided locally.
type Limiter struct {
	rdb    redis.UniversalClient
	prefix string

	// Now replaces the clock, which names the windows (tests); nil is time.Now. Set it
	// before use.
	Now func() time.Time

	// SyncInterval is how often Run sends local counts to Redis; 0 means
	// DefaultSyncInterval. Set it before Run.
	SyncInterval time.Duration
	// CallTimeout bounds each Redis round trip of Allow; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Log, when set, hears when sending counts starts failing and when it recovers.
	Log *slog.Logger

	shards [numShards]shard
	// lastExpiry is when FlushOnce last dropped ended windows (Unix ms).
	lastExpiry atomic.Int64
}

// numShards spreads window keys over mutexes so concurrent requests rarely wait on each
// other.
const numShards = 64

type shard struct {
	mu sync.Mutex
	m  map[string]*entry // by Redis key, which names the window
	// dirty lists the entries with counts to send, so that a flush costs what changed, not
	// every key of the window (a busy replica holds one per job and scope).
	dirty []*entry
	_     [24]byte // one cache line per shard
}

// markDirty queues e for the next flush; sh.mu held.
func (sh *shard) markDirty(e *entry) {
	if !e.dirty {
		e.dirty = true
		sh.dirty = append(sh.dirty, e)
	}
}

// entry is one window key's state on this replica; its shard's mutex guards it.
type entry struct {
	synced  int64 // highest count Redis returned for the key
	pending int32 // admitted here, not yet sent
	sending int32 // sent, answer not back: still counted against the local half
	reset   int64 // window end, Unix ms
	window  int64 // window length, ms (the key's expiry is window+1s)
	key     string
	dirty   bool // in its shard's dirty list
	gone    bool // dropped from its shard's map: its window is over
}

// New returns a limiter whose keys start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Limiter {
	l := &Limiter{rdb: rdb, prefix: prefix}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*entry)
	}
	return l
}

func (l *Limiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// DefaultCallTimeout bounds the Redis round trip: a slow Redis must not slow every runner
// down (Allow fails open past it).
const DefaultCallTimeout = 200 * time.Millisecond

// expiryMargin keeps a window's key (and its entry) a little past the window's end.
const expiryMargin = time.Second

// Allow counts one request for key. The key is hashed (it may be a token). On a Redis
// error it returns the error with an allowing decision: callers fail open, because a
// Redis outage must not stop a CI fleet.
func (l *Limiter) Allow(ctx context.Context, scope, key string, lim Limit) (Decision, error) {
	now := l.now()
	window := now.Truncate(lim.Window)
	reset := window.Add(lim.Window)
	d := Decision{Allowed: true, Limit: lim.Requests, Remaining: lim.Requests, Reset: reset, RetryAfter: reset.Sub(now)}
	if lim.Requests <= 0 {
		return d, nil
	}
	var buf [128]byte
	sum := sha256.Sum256(append(buf[:0], key...)) // via buf: []byte(key) allocates past 32 bytes
	k := l.appendKey(buf[:0], scope, &sum, window)
	requests, half := int64(lim.Requests), int64(lim.Requests/2)

	sh := &l.shards[sum[0]%numShards]
	sh.mu.Lock()
	e := sh.m[string(k)]
	if e == nil {
		e = &entry{reset: reset.UnixMilli(), window: lim.Window.Milliseconds(), key: string(k)}
		sh.m[e.key] = e
	}
	known := e.synced + int64(e.sending) + int64(e.pending)
	switch {
	case e.synced >= requests:
		sh.mu.Unlock()
		d.Allowed, d.Remaining = false, 0
		return d, nil
	case known+1 <= half:
		e.pending++
		sh.markDirty(e)
		sh.mu.Unlock()
		d.Remaining = int(requests - known - 1)
		return d, nil
	}
	send := int64(e.pending) + 1
	e.sending += e.pending + 1
	e.pending = 0
	sh.mu.Unlock()

	n, err := l.incr(ctx, string(k), send, lim.Window)

	sh.mu.Lock()
	e.sending -= int32(send)
	if err != nil {
		e.pending += int32(send - 1) // the admitted ones go out with the next send
		if e.pending > 0 {
			sh.markDirty(e)
		}
	} else {
		e.synced = max(e.synced, n)
	}
	sh.mu.Unlock()
	if err != nil {
		return d, err
	}
	d.Remaining = int(max(requests-n, 0))
	d.Allowed = n <= requests
	return d, nil
}

// Exceeded reports, without counting a request, whether key's count in the current window
// has reached lim.Requests as far as this replica knows it (its own admissions and the
// highest count Redis returned for the key). A check before a request that must not be
// counted unless it fails (a token guess): the failures themselves go through Allow, which
// asks Redis near the limit, so every replica the failures reach learns of them.
func (l *Limiter) Exceeded(scope, key string, lim Limit) (bool, time.Duration) {
	now := l.now()
	window := now.Truncate(lim.Window)
	reset := window.Add(lim.Window)
	if lim.Requests <= 0 {
		return false, 0
	}
	var buf [128]byte
	sum := sha256.Sum256(append(buf[:0], key...))
	k := l.appendKey(buf[:0], scope, &sum, window)
	sh := &l.shards[sum[0]%numShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[string(k)]
	if e == nil {
		return false, 0
	}
	known := max(e.synced, e.synced+int64(e.sending)+int64(e.pending))
	return known >= int64(lim.Requests), reset.Sub(now)
}

// appendKey appends the Redis key of a window: the hash in braces keeps every key of one
// counter in one Redis Cluster slot.
func (l *Limiter) appendKey(b []byte, scope string, sum *[sha256.Size]byte, window time.Time) []byte {
	b = append(b, l.prefix...)
	b = append(b, "rl:"...)
	b = append(b, scope...)
	b = append(b, ":{"...)
	b = hex.AppendEncode(b, sum[:12])
	b = append(b, "}:"...)
	return strconv.AppendInt(b, window.UnixMilli(), 36)
}

func (l *Limiter) incr(ctx context.Context, key string, n int64, window time.Duration) (int64, error) {
	timeout := l.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	counts, err := countScript.Run(ctx, l.rdb, []string{key}, n, expiryOf(window)).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(counts) != 1 {
		return 0, fmt.Errorf("rate limit count: %d answers for one key", len(counts))
	}
	return counts[0], nil
}

// countScript adds ARGV[2i-1] to the count of KEYS[i] and, when that created the key (its
// count is what was added), has it expire in ARGV[2i] ms; it returns the counts in order.
// One command for a decision near the limit, or for a whole flush, where an INCRBY and a
// PEXPIRE per key (in a MULTI for a decision) were two to four: the commands, not the
// counting, are most of what Redis spends on them. The key of a window is created within
// the window, so its first expiry (the window plus expiryMargin) outlives it.
var countScript = redis.NewScript(`
local out = {}
for i, key in ipairs(KEYS) do
    local add = tonumber(ARGV[2 * i - 1])
    local n = redis.call('INCRBY', key, add)
    if n == add then
        redis.call('PEXPIRE', key, ARGV[2 * i])
    end
    out[i] = n
end
return out`)

// expiryOf is the expiry, in ms, of a window's key.
func expiryOf(window time.Duration) int64 {
	return (window + expiryMargin).Milliseconds()
}
