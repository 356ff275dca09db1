package main

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisCounter counts the commands the in-process jobapi sends to Redis (a go-redis hook
// on its client; a pipeline's or a transaction's commands each count, MULTI and EXEC
// too), and apart those of the rate limiter (keys under its "rl:" prefix, and the scripts
// it runs on them).
type redisCounter struct {
	total, rateLimit atomic.Int64
}

type redisCounts struct{ total, rateLimit int64 }

func (c *redisCounter) snapshot() redisCounts {
	return redisCounts{total: c.total.Load(), rateLimit: c.rateLimit.Load()}
}

func (c *redisCounter) count(cmds []redis.Cmder) {
	var rl, tx int64
	for _, cmd := range cmds {
		switch {
		case isRateLimit(cmd):
			rl++
		case cmd.Name() == "multi" || cmd.Name() == "exec":
			tx++
		}
	}
	c.total.Add(int64(len(cmds)))
	if rl > 0 {
		// The limiter's MULTI…EXEC count with it.
		c.rateLimit.Add(rl + tx)
	}
}

func isRateLimit(cmd redis.Cmder) bool {
	for _, a := range cmd.Args()[1:] {
		if s, ok := a.(string); ok && strings.Contains(s, "rl:") {
			return true
		}
	}
	return false
}

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds)
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*redisCounter)(nil)
