package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// Each reaper reads its candidates through a partial index, oldest first, and locks them
// with SKIP LOCKED so replicas reap disjoint batches.
const (
	reapNoUpdates = `
SELECT id FROM builds WHERE status = 'running' AND updated_at < $1
ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED`
	reapExecution = `
SELECT id FROM builds WHERE status = 'running' AND run_deadline < $1
ORDER BY run_deadline LIMIT $2 FOR UPDATE SKIP LOCKED`
	reapPending = `
SELECT id FROM builds WHERE status = 'pending' AND queued_at < $1
ORDER BY queued_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`
	reapCanceling = `
SELECT id FROM builds WHERE status = 'canceling' AND updated_at < $1
ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED`
)

type reaper struct {
	query  string
	cutoff time.Duration
	from   builds.Status
	to     builds.Status
	reason string
	count  func(*builds.ReapResult) *int
}

// Reap runs every reaper once, one batch each, and reports what it did.
func (s *Store) Reap(ctx context.Context, p builds.ReapParams) (builds.ReapResult, error) {
	var res builds.ReapResult
	reapers := []reaper{
		{reapNoUpdates, p.NoUpdates, builds.StatusRunning, builds.StatusFailed, builds.ReasonNoUpdatesRunning,
			func(r *builds.ReapResult) *int { return &r.NoUpdates }},
		{reapExecution, p.ExecutionGrace, builds.StatusRunning, builds.StatusFailed, builds.ReasonJobExecutionTimeout,
			func(r *builds.ReapResult) *int { return &r.ExecutionTimeout }},
		{reapPending, p.Pending, builds.StatusPending, builds.StatusFailed, builds.ReasonStuckPending,
			func(r *builds.ReapResult) *int { return &r.StuckPending }},
		{reapCanceling, p.Canceling, builds.StatusCanceling, builds.StatusCanceled, "",
			func(r *builds.ReapResult) *int { return &r.Canceled }},
	}
	for _, rp := range reapers {
		if rp.cutoff <= 0 {
			continue
		}
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, rp.query, p.Now.Add(-rp.cutoff), p.Batch)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			for _, id := range ids {
				policy := p.Policy
				f, err := finishTx(ctx, tx, builds.Finish{BuildID: id, From: []builds.Status{rp.from}, To: rp.to,
					Reason: rp.reason, Event: builds.EventDroppedStuck, Now: p.Now, Policy: &policy,
					Detail: map[string]any{"reaper": rp.reason, "threshold_seconds": rp.cutoff.Seconds()}})
				if err != nil {
					return err
				}
				*rp.count(&res)++
				if f.Retry != nil {
					res.Retried++
				}
				res.Queued = res.Queued || f.Queued
				res.Pipelines = append(res.Pipelines, f.Build.PipelineID)
			}
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}
