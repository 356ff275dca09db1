package pgstore

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// expiredAcks reads only waiting builds whose deadline of record passed, through the partial
// index builds_waiting_ack_idx: the cost follows the number of expired builds, not of all
// builds. SKIP LOCKED gives concurrent sweepers (one per replica) disjoint batches, and a
// late ack blocks on the row lock until this sweep commits, then finds the build failed.
const expiredAcks = `
SELECT b.id, b.assigned_at, COALESCE(m.system_id, ''), b.pipeline_id FROM builds b
LEFT JOIN runner_managers m ON m.id = b.runner_manager_id
WHERE b.status = 'waiting_for_runner_ack' AND b.ack_deadline <= $1
ORDER BY b.ack_deadline
LIMIT $2
FOR UPDATE OF b SKIP LOCKED`

// SweepExpiredAcks processes one batch of waiting builds whose deadline of record passed,
// carrying out builds.DecideExpiredAck for each: those still holding a live ack key (kept
// alive) get their deadline moved, the others are failed with runner_provisioning_timeout
// and retried when the policy allows.
func (s *Store) SweepExpiredAcks(ctx context.Context, p builds.SweepParams) (builds.SweepResult, error) {
	var res builds.SweepResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = builds.SweepResult{}
		type candidate struct {
			id         int64
			assignedAt time.Time
			systemID   string
			pipelineID int64
		}
		rows, err := tx.Query(ctx, expiredAcks, p.Now, p.Batch)
		if err != nil {
			return err
		}
		var cands []candidate
		for rows.Next() {
			var c candidate
			if err := rows.Scan(&c.id, &c.assignedAt, &c.systemID, &c.pipelineID); err != nil {
				rows.Close()
				return err
			}
			cands = append(cands, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		res.Candidates = len(cands)
		if len(cands) == 0 {
			return nil
		}
		// Each timeout locks its pipeline row (retry, stage advancement) until commit. Taking
		// them in pipeline order keeps two sweepers with batches across the same pipelines
		// from locking them in opposite orders and deadlocking.
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].pipelineID < cands[j].pipelineID })
		ids := make([]int64, len(cands))
		for i, c := range cands {
			ids[i] = c.id
		}
		// Without Redis we cannot tell a kept-alive build from an abandoned one: only the
		// builds past the max provisioning wait are failed, the rest wait for Redis.
		alive, aliveErr := p.Alive(ctx, ids)
		res.LeaseErr = aliveErr
		// Each pipeline is advanced once, after the last of its builds in the batch, not once
		// per build: three statements per pipeline instead of per build. Candidates come in
		// pipeline order, so pipelines are still locked in ascending order.
		var advanceDue int64
		advanceNow := func() error {
			if advanceDue == 0 {
				return nil
			}
			queued, err := advance(ctx, tx, advanceDue, p.Now)
			advanceDue = 0
			res.Queued = res.Queued || queued
			return err
		}
		for _, c := range cands {
			if c.pipelineID != advanceDue {
				if err := advanceNow(); err != nil {
					return err
				}
			}
			ttl, live := alive[c.id]
			d := builds.DecideExpiredAck(p, builds.ExpiredAck{ID: c.id, AssignedAt: c.assignedAt,
				RunnerManager: c.systemID, TTL: ttl, Alive: live}, aliveErr == nil)
			switch d.Action {
			case builds.AckSkip:
				res.Skipped++
				continue
			case builds.AckExtend:
				if _, err := tx.Exec(ctx, extendAck, c.id, d.Deadline); err != nil {
					return err
				}
				res.Extended++
				continue
			}
			f, err := finishBuildTx(ctx, tx, d.Finish)
			if errors.Is(err, builds.ErrConflict) {
				// Not waiting with its deadline of record passed any more. The candidate's
				// row lock makes this unreachable today; the fail statement checks anyway.
				continue
			}
			if err != nil {
				return err
			}
			res.TimedOut++
			res.TimedOutIDs = append(res.TimedOutIDs, c.id)
			res.Pipelines = append(res.Pipelines, f.Build.PipelineID)
			if f.Retry != nil {
				res.Retried++
			} else if d.Finish.Policy.Limit(f.Build.Payload.Retry, builds.ReasonRunnerProvisioningTimeout) > 0 {
				res.Exhausted++
			}
			res.Queued = res.Queued || f.Queued
			advanceDue = c.pipelineID
		}
		return advanceNow()
	})
	return res, err
}
