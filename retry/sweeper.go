// Package retry runs the background worker that enforces the two-phase deadline: the ack
// sweeper fails waiting builds whose runner never acknowledged them, with
// runner_provisioning_timeout, and lets the auto-retry policy create their next attempt in
// the same transaction. It is safe to run on every replica at once: batches are claimed
// with FOR UPDATE SKIP LOCKED, so two sweepers never process the same build. The choice
// per build is builds.DecideExpiredAck, the retry builds.DecideAutoRetry. The workers that
// reap abandoned builds and stuck stages live in package reaper.
package retry

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/periodic"
)

// Sweeper fails expired two-phase assignments.
type Sweeper struct {
	Store    builds.Store
	Leases   builds.Leases
	Queue    builds.Queue
	Policy   builds.RetryPolicy
	Interval time.Duration
	MaxWait  time.Duration
	// Batch is how many expired builds one transaction handles.
	Batch int
	// BatchTimeout bounds one batch's transaction (0: 10 s).
	BatchTimeout time.Duration
	Now          func() time.Time
	Log          *slog.Logger
	// OnSweep, when set, is told what each sweep did (metrics).
	OnSweep func(Report, error)
	// Notify, when set, wakes the waiters of pipelines whose builds changed.
	Notify func(ctx context.Context, pipelineIDs []int64)

	// shrunk, when > 0, replaces Batch after a batch ran out of time: a slow Postgres (cold
	// after a restart, overloaded) must still see progress rather than the same batch
	// rolled back at every attempt. It then follows the time batches take, aiming at a
	// quarter of the timeout, and grows back to Batch when they are quick again.
	shrunk atomic.Int64
}

// Report counts what one sweep did across its batches.
type Report struct {
	Batches   int
	Extended  int
	TimedOut  int
	Retried   int
	Exhausted int
	Duration  time.Duration
	// TimedOutIDs lists the builds this sweep failed (bounded by what it processed).
	TimedOutIDs []int64
}

// batchTimeout bounds one batch so a stuck Postgres or Redis call cannot hold row locks.
const batchTimeout = 10 * time.Second

func (s *Sweeper) batchTimeout() time.Duration {
	if s.BatchTimeout > 0 {
		return s.BatchTimeout
	}
	return batchTimeout
}

// SweepOnce processes every expired waiting build, batch by batch, until none is left. A
// failed batch rolls back whole, so what earlier batches committed is kept.
func (s *Sweeper) SweepOnce(ctx context.Context) (Report, error) {
	start := time.Now()
	now := now(s.Now)
	full := s.Batch
	if full <= 0 {
		full = 500
	}
	batch := full
	if n := int(s.shrunk.Load()); n > 0 && n < full {
		batch = n
	}
	var rep Report
	for {
		bstart := time.Now()
		bctx, cancel := context.WithTimeout(ctx, s.batchTimeout())
		res, err := s.Store.SweepExpiredAcks(bctx, builds.SweepParams{
			Now: now, Batch: batch, MaxWait: s.MaxWait, Policy: s.Policy, Alive: s.Leases.TTLs,
		})
		timedOut := bctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil && timedOut && batch > 1 {
			// Rolled back for lack of time: try again at once with half as many.
			batch /= 2
			s.shrunk.Store(int64(batch))
			s.Log.WarnContext(ctx, "ack sweep batch timed out; retrying with a smaller batch", "batch", batch, "error", err)
			continue
		}
		if err != nil {
			rep.Duration = time.Since(start)
			return rep, err
		}
		used := batch
		if batch < full {
			// Shrunk earlier: aim at a quarter of the timeout, growing at most twofold.
			target, took := s.batchTimeout()/4, time.Since(bstart)
			next := batch * 2
			if took > target/2 {
				next = int(float64(batch) * float64(target) / float64(took))
			}
			batch = max(1, min(next, batch*2, full))
			s.shrunk.Store(int64(batch))
		}
		if res.Candidates == 0 {
			break
		}
		rep.Batches++
		rep.Extended += res.Extended
		rep.TimedOut += res.TimedOut
		rep.Retried += res.Retried
		rep.Exhausted += res.Exhausted
		rep.TimedOutIDs = append(rep.TimedOutIDs, res.TimedOutIDs...)
		if res.Queued && s.Queue != nil {
			if err := s.Queue.Bump(ctx); err != nil {
				s.Log.WarnContext(ctx, "queue version not bumped after retries", "error", err)
			}
		}
		if s.Notify != nil {
			s.Notify(ctx, res.Pipelines)
		}
		for _, id := range res.TimedOutIDs {
			// The key is gone or dead already; this only tidies a key that a keep-alive
			// recreated at the last moment. Such keys expire by themselves, so the first
			// failure ends the tidying: a batch of calls into a Redis that is down would
			// each wait out the call timeout and hold the sweep for minutes.
			if err := s.Leases.Release(ctx, id); err != nil {
				break
			}
		}
		if res.LeaseErr != nil {
			// What this batch could decide is committed; the rest waits for Redis.
			rep.Duration = time.Since(start)
			return rep, fmt.Errorf("check ack keys (%d builds wait for Redis): %w", res.Skipped, res.LeaseErr)
		}
		if res.Candidates < used {
			break
		}
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// Run sweeps every Interval until ctx ends; see periodic.Run.
func (s *Sweeper) Run(ctx context.Context) error {
	return periodic.Run(ctx, s.Interval, s.Log, "ack sweep", func(ctx context.Context) error {
		rep, err := s.SweepOnce(ctx)
		if s.OnSweep != nil {
			s.OnSweep(rep, err)
		}
		if err == nil && (rep.TimedOut > 0 || rep.Extended > 0) {
			s.Log.InfoContext(ctx, "ack sweep", "timed_out", rep.TimedOut, "retried", rep.Retried,
				"exhausted", rep.Exhausted, "extended", rep.Extended, "duration_ms", rep.Duration.Milliseconds())
		}
		return err
	})
}

func now(f func() time.Time) time.Time {
	if f != nil {
		return f()
	}
	return time.Now()
}
