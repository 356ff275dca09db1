package pgstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// Each reaper reads its candidates through a partial index, oldest first, and locks them
// with SKIP LOCKED so replicas reap disjoint batches.
const (
	reapNoUpdates = `
SELECT id, pipeline_id FROM builds WHERE status = 'running' AND updated_at < $1 AND NOT bridge
ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED`
	reapExecution = `
SELECT id, pipeline_id FROM builds WHERE status = 'running' AND run_deadline < $1
ORDER BY run_deadline LIMIT $2 FOR UPDATE SKIP LOCKED`
	reapPending = `
SELECT id, pipeline_id FROM builds WHERE status = 'pending' AND queued_at < $1
ORDER BY queued_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`
	reapCanceling = `
SELECT id, pipeline_id FROM builds WHERE status = 'canceling' AND updated_at < $1
ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED`
)

type reapCandidate struct {
	ID, PipelineID int64
}

// reapQueries reads each reaper's candidates.
var reapQueries = map[builds.Reaper]string{
	builds.ReapNoUpdates: reapNoUpdates,
	builds.ReapExecution: reapExecution,
	builds.ReapPending:   reapPending,
	builds.ReapCanceling: reapCanceling,
}

// Reap runs every reaper of p.Rules once, one batch each, and reports what it did.
func (s *Store) Reap(ctx context.Context, p builds.ReapParams) (builds.ReapResult, error) {
	var res builds.ReapResult
	for _, rp := range p.Rules() {
		if rp.Cutoff <= 0 {
			continue
		}
		// One attempt's counts: inTx reruns the function after a deadlock.
		var batch builds.ReapResult
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			batch = builds.ReapResult{}
			rows, err := tx.Query(ctx, reapQueries[rp.Reaper], p.Now.Add(-rp.Cutoff), p.Batch)
			if err != nil {
				return err
			}
			cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reapCandidate])
			if err != nil {
				return err
			}
			// Advance locks each pipeline row: take them in one global order, so that reapers
			// on several replicas do not deadlock on each other's batches.
			slices.SortFunc(cands, func(a, b reapCandidate) int {
				return cmp.Or(cmp.Compare(a.PipelineID, b.PipelineID), cmp.Compare(a.ID, b.ID))
			})
			for _, c := range cands {
				f, err := finishTx(ctx, tx, rp.Finish(c.ID, p.Now, p.Policy))
				if err != nil {
					return err
				}
				*rp.Count(&batch)++
				if f.Retry != nil {
					batch.Retried++
				}
				batch.Queued = batch.Queued || f.Queued
				batch.Pipelines = append(batch.Pipelines, f.Build.PipelineID)
				if rp.From.OnRunnerLog() {
					batch.Ended = append(batch.Ended, builds.Build{ID: f.Build.ID, Status: f.Build.Status})
				}
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		*rp.Count(&res) += *rp.Count(&batch)
		res.Retried += batch.Retried
		res.Queued = res.Queued || batch.Queued
		res.Pipelines = append(res.Pipelines, batch.Pipelines...)
		res.Ended = append(res.Ended, batch.Ended...)
	}
	return res, nil
}
