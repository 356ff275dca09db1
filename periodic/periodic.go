// Package periodic runs the background workers' passes (the ack sweeper, the reapers,
// the stuck-stage check) on a jittered interval with backoff after failures.
package periodic

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Run calls once every interval (with ±10% jitter, so replicas spread out) until ctx
// ends. A failing call is logged and retried with exponential backoff up to a minute;
// whatever earlier batches committed stays committed.
func Run(ctx context.Context, interval time.Duration, log *slog.Logger, name string, once func(context.Context) error) error {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	backoff := interval
	for {
		err := once(ctx)
		wait := interval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.ErrorContext(ctx, name+" failed; will retry", "error", err, "backoff", backoff)
			wait = backoff
			backoff = min(backoff*2, time.Minute)
		default:
			backoff = interval
		}
		jitter := time.Duration(rand.Int64N(int64(wait)/5 + 1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait - wait/10 + jitter):
		}
	}
}
