package pgstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// dueBuilds reads scheduled builds whose time has come through builds_status_idx (delayed
// jobs are few at any time), and locks them with SKIP LOCKED so that the passes of several
// replicas take disjoint batches.
const dueBuilds = `
SELECT id, pipeline_id FROM builds WHERE status = 'scheduled' AND scheduled_at <= $1
ORDER BY scheduled_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`

// enqueueDue moves the due builds of one pipeline to pending.
const enqueueDue = `
WITH b AS (
    UPDATE builds SET status = ` + queuedStatus + `, queued_at = $2, updated_at = $2
    WHERE id = ANY($1) AND status = 'scheduled'
    RETURNING id, scheduled_at, resource_group_id
)
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, ` + queuedEvent + `, $2, jsonb_build_object('scheduled_at', scheduled_at) FROM b`

// EnqueueDue moves one batch of scheduled builds whose scheduled_at passed to pending and
// advances their pipelines (scheduled → pending or running), in one transaction.
func (s *Store) EnqueueDue(ctx context.Context, now time.Time, batch int) (builds.DueResult, error) {
	var res builds.DueResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = builds.DueResult{}
		rows, err := tx.Query(ctx, dueBuilds, now, batch)
		if err != nil {
			return err
		}
		cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reapCandidate])
		if err != nil {
			return err
		}
		res.Checked = len(cands)
		// Pipelines locked in one global order, as the reapers do, so that passes on
		// several replicas never deadlock on each other.
		slices.SortFunc(cands, func(a, b reapCandidate) int {
			return cmp.Or(cmp.Compare(a.PipelineID, b.PipelineID), cmp.Compare(a.ID, b.ID))
		})
		for start := 0; start < len(cands); {
			end := start
			var ids []int64
			for ; end < len(cands) && cands[end].PipelineID == cands[start].PipelineID; end++ {
				ids = append(ids, cands[end].ID)
			}
			tag, err := tx.Exec(ctx, enqueueDue, ids, now)
			if err != nil {
				return err
			}
			res.Enqueued += int(tag.RowsAffected())
			if _, err := advance(ctx, tx, cands[start].PipelineID, now); err != nil {
				return err
			}
			res.Pipelines = append(res.Pipelines, cands[start].PipelineID)
			start = end
		}
		return nil
	})
	return res, err
}
