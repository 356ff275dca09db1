package reaper

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/periodic"
)

// DueJobs moves delayed jobs whose start_in has passed from scheduled to pending and
// advances their pipelines. Their time of record (scheduled_at) is in Postgres, so a job
// scheduled before a restart, or by another replica, starts all the same. Safe on every
// replica: batches are locked with SKIP LOCKED. A job starts within one Interval of its
// time.
type DueJobs struct {
	Store    builds.Store
	Queue    builds.Queue
	Interval time.Duration
	Batch    int
	Now      func() time.Time
	Log      *slog.Logger
	Notify   func(ctx context.Context, pipelineIDs []int64)
}

// EnqueueOnce moves every job due now, batch by batch, and returns how many it moved.
func (d *DueJobs) EnqueueOnce(ctx context.Context) (int, error) {
	batch := d.Batch
	if batch <= 0 {
		batch = 500
	}
	total := 0
	for {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		res, err := d.Store.EnqueueDue(bctx, now(d.Now), batch)
		cancel()
		total += res.Enqueued
		if res.Enqueued > 0 && d.Queue != nil {
			if err := d.Queue.Bump(ctx); err != nil {
				d.Log.WarnContext(ctx, "queue version not bumped after delayed jobs came due", "error", err)
			}
		}
		if d.Notify != nil && len(res.Pipelines) > 0 {
			d.Notify(ctx, res.Pipelines)
		}
		if err != nil || res.Checked < batch {
			return total, err
		}
	}
}

// AssignOnce gives free resource groups with a job waiting to their next job, and returns
// how many builds it queued. The transactions that free a group assign it themselves; this
// is the net under them (a candidate locked by a cancel at that moment), run with the due
// pass.
func (d *DueJobs) AssignOnce(ctx context.Context) (int, error) {
	batch := d.Batch
	if batch <= 0 {
		batch = 500
	}
	bctx, cancel := context.WithTimeout(ctx, batchTimeout)
	n, err := d.Store.AssignFreeResourceGroups(bctx, now(d.Now), batch)
	cancel()
	if n > 0 && d.Queue != nil {
		if err := d.Queue.Bump(ctx); err != nil {
			d.Log.WarnContext(ctx, "queue version not bumped after resource groups were assigned", "error", err)
		}
	}
	return n, err
}

// Run moves due jobs, and assigns free resource groups, every Interval until ctx ends.
func (d *DueJobs) Run(ctx context.Context) error {
	return periodic.Run(ctx, d.Interval, d.Log, "delayed jobs", func(ctx context.Context) error {
		n, err := d.EnqueueOnce(ctx)
		if n > 0 {
			d.Log.InfoContext(ctx, "delayed jobs queued", "count", n)
		}
		assigned, aerr := d.AssignOnce(ctx)
		if assigned > 0 {
			d.Log.InfoContext(ctx, "free resource groups assigned", "count", assigned)
		}
		return errors.Join(err, aerr)
	})
}
