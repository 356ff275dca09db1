// Package ratelimit counts requests per key in fixed windows shared by every replica
// through Redis, and answers what a runner needs to back off politely: whether the request
// may go on, how many are left, and when the window resets.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
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
	// Reset is when the current window ends.
	Reset time.Time
}

// Limiter is a fixed-window counter in Redis. A window's key holds the count and expires
// with the window, so nothing accumulates.
type Limiter struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time
}

// New returns a limiter whose keys start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix, now: time.Now}
}

// callTimeout bounds the Redis round trip: a slow Redis must not slow every runner down.
const callTimeout = 200 * time.Millisecond

// Allow counts one request for key. The key is hashed (it may be a token). On a Redis
// error it returns the error with an allowing decision: callers fail open, because a
// Redis outage must not stop a CI fleet.
func (l *Limiter) Allow(ctx context.Context, scope, key string, lim Limit) (Decision, error) {
	now := l.now()
	window := now.Truncate(lim.Window)
	reset := window.Add(lim.Window)
	d := Decision{Allowed: true, Limit: lim.Requests, Remaining: lim.Requests, Reset: reset}
	if lim.Requests <= 0 {
		return d, nil
	}
	sum := sha256.Sum256([]byte(key))
	k := l.prefix + "rl:" + scope + ":{" + hex.EncodeToString(sum[:12]) + "}:" + strconv.FormatInt(window.UnixMilli(), 36)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var incr *redis.IntCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, k)
		p.PExpire(ctx, k, lim.Window+time.Second)
		return nil
	})
	if err != nil {
		return d, err
	}
	n := int(incr.Val())
	d.Remaining = max(lim.Requests-n, 0)
	d.Allowed = n <= lim.Requests
	return d, nil
}
