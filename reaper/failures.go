package reaper

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/periodic"
)

// FailureCancels is the pass under workflow:auto_cancel:on_job_failure: all. The replica
// whose runner reported the failure cancels the pipeline right after the finish commits;
// this pass, on every replica, cancels the pipelines that were not (a failure from the
// reapers, the stuck check, a bridge's child, or a replica that stopped in between).
type FailureCancels struct {
	// Cancel is builds.Service.CancelFailedOnce.
	Cancel   func(ctx context.Context, limit int) (int, error)
	Interval time.Duration
	Batch    int
	Log      *slog.Logger
}

// Once cancels a batch of such pipelines and returns how many.
func (f *FailureCancels) Once(ctx context.Context) (int, error) {
	batch := f.Batch
	if batch <= 0 {
		batch = 100
	}
	bctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	return f.Cancel(bctx, batch)
}

// Run calls Once every Interval until ctx ends.
func (f *FailureCancels) Run(ctx context.Context) error {
	return periodic.Run(ctx, f.Interval, f.Log, "auto-cancel on job failure", func(ctx context.Context) error {
		n, err := f.Once(ctx)
		if n > 0 {
			f.Log.InfoContext(ctx, "pipelines canceled after a job failure", "count", n)
		}
		return err
	})
}
