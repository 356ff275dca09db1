package schedules

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/periodic"
)

// passBatch is how many due schedules one read takes; the pass reads again while full.
const passBatch = 100

// claimTimeout bounds one read of due schedules and one claim, so that a stuck Postgres
// call cannot hold the pass.
const claimTimeout = 10 * time.Second

// startTimeout bounds one pipeline's creation: resolving the ref on the remote and reading
// the configuration there may take a while, but not the whole pass. A claimed tick's
// creation is not cut short by the replica stopping (the tick would be lost), so this also
// bounds how long a stop may wait for it.
const startTimeout = time.Minute

// TickResult counts what one pass did.
type TickResult struct {
	Due     int // schedules found due
	Claimed int // ticks this replica claimed
	Started int // pipelines created
	Failed  int // claimed ticks whose pipeline could not be created
}

// Worker runs the schedules' ticks on one replica; every replica runs one.
type Worker struct {
	Service  *Service
	Interval time.Duration
	Log      *slog.Logger
	OnTick   func(TickResult, error)
}

// TickOnce starts the pipeline of every schedule due now. A tick is claimed before its
// pipeline is created: a claimed tick whose creation fails (the ref is gone, the
// configuration is broken, the remote does not answer) is logged and not tried again; the
// schedule runs at its next time, as GitLab's does.
func (w *Worker) TickOnce(ctx context.Context) (TickResult, error) {
	var res TickResult
	s := w.Service
	for {
		now := s.now()
		rctx, cancel := context.WithTimeout(ctx, claimTimeout)
		due, err := s.store.DueSchedules(rctx, now, passBatch)
		cancel()
		if err != nil {
			return res, err
		}
		res.Due += len(due)
		claimedBefore := res.Claimed
		for _, sc := range due {
			if ctx.Err() != nil {
				return res, nil
			}
			timing, err := ParseTiming(sc.Cron, sc.CronTimezone)
			if err != nil {
				// Stored only after this check; a zone the database no longer knows.
				w.Log.ErrorContext(ctx, "pipeline schedule has a cron that no longer parses", "schedule_id", sc.ID,
					"project_id", sc.ProjectID, "error", err)
				continue
			}
			// The first time after now, not after the due time: ticks missed while no
			// replica ran collapse into this one.
			next := timing.Next(now)
			cctx, cancel := context.WithTimeout(ctx, claimTimeout)
			claimed, err := s.store.ClaimTick(cctx, sc.ID, sc.NextRunAt, next)
			cancel()
			if err != nil {
				return res, err
			}
			if !claimed {
				continue // another replica has this tick
			}
			res.Claimed++
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
			p, err := s.run(sctx, sc)
			cancel()
			if err != nil {
				res.Failed++
				w.Log.ErrorContext(ctx, "pipeline schedule's pipeline not created", "schedule_id", sc.ID,
					"project_id", sc.ProjectID, "ref", sc.Ref, "due", sc.NextRunAt, "next_run_at", next, "error", err)
				continue
			}
			res.Started++
			w.Log.InfoContext(ctx, "pipeline schedule started a pipeline", "schedule_id", sc.ID,
				"project_id", sc.ProjectID, "pipeline_id", p.ID, "due", sc.NextRunAt, "next_run_at", next)
		}
		if len(due) < passBatch || res.Claimed == claimedBefore {
			// A full batch of which none was ours to claim would be read again as it is.
			return res, nil
		}
	}
}

// Run ticks every Interval until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	return periodic.Run(ctx, w.Interval, w.Log, "pipeline schedules", func(ctx context.Context) error {
		res, err := w.TickOnce(ctx)
		if w.OnTick != nil {
			w.OnTick(res, err)
		}
		return err
	})
}
