package pgflags

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// listenIdle is how long the LISTEN connection may sit silent before a ping checks it:
	// a half-open TCP connection would otherwise hide lost notifications until keepalive.
	listenIdle = 30 * time.Second
	// Reconnect backoff for the LISTEN connection; polling covers the gap meanwhile.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// Run keeps the snapshot current: it reloads every Options.Refresh and on every NOTIFY on
// Channel (a dedicated connection that reconnects with backoff). It blocks until ctx ends,
// then returns nil. Call it once per Provider.
func (p *Provider) Run(ctx context.Context) error {
	kick := make(chan struct{}, 1) // coalesces a burst of notifications into one reload
	var wg sync.WaitGroup
	wg.Go(func() { p.listen(ctx, kick) })
	p.refreshLoop(ctx, kick)
	wg.Wait()
	return nil
}

func (p *Provider) refreshLoop(ctx context.Context, kick <-chan struct{}) {
	t := time.NewTicker(p.opts.Refresh)
	defer t.Stop()
	for {
		// Errors are logged by noteLoad on state changes; here they only mean "try again".
		_ = p.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
	}
}

func (p *Provider) listen(ctx context.Context, kick chan<- struct{}) {
	backoff := minBackoff
	for {
		lived, err := p.listenOnce(ctx, kick)
		if ctx.Err() != nil {
			return
		}
		if lived > 0 {
			p.opts.Logger.Warn("feature flag LISTEN connection lost; reconnecting", "error", err)
		}
		// Only a connection that held for a while resets the backoff, so one that dies right
		// after LISTEN cannot make us reconnect (and log) in a tight loop.
		if lived > maxBackoff {
			backoff = minBackoff
		} else {
			backoff = min(backoff*2, maxBackoff)
		}
		// Full jitter: replicas that lost Postgres together do not reconnect together.
		sleep := time.Duration(rand.Int64N(int64(backoff)) + 1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(sleep):
		}
	}
}

// listenOnce connects, LISTENs and forwards notifications until the connection fails or ctx
// ends. lived is how long it listened (0 if LISTEN never succeeded).
func (p *Provider) listenOnce(ctx context.Context, kick chan<- struct{}) (lived time.Duration, err error) {
	setupCtx, cancel := context.WithTimeout(ctx, p.opts.QueryTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(setupCtx, p.connConfig.Copy())
	if err != nil {
		return 0, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(setupCtx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return 0, err
	}
	start := time.Now()
	// Changes committed while we were not listening sent nobody a notification.
	signal(kick)

	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenIdle)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			signal(kick)
		case ctx.Err() != nil:
			return time.Since(start), nil
		case pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
			pingCtx, cancel := context.WithTimeout(ctx, p.opts.QueryTimeout)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return time.Since(start), err
			}
		default:
			return time.Since(start), err
		}
	}
}

func signal(kick chan<- struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}
