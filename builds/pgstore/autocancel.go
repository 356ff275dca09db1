package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// redundantPipelines is GitLab's choice of pipelines a new one makes redundant
// (Ci::PipelineCreation::CancelRedundantPipelinesService): older pipelines of the project on
// the same ref, of another commit, still alive, whose own workflow:auto_cancel:on_new_commit
// lets them go. conservative (the default): only if no job that has started (taken by a
// runner, running or finished with a result) is uninterruptible; GitLab's STARTED_STATUSES
// are running, success and failed, and jobapi's waiting_for_runner_ack is a job a runner has
// taken, so it counts as started too. interruptible: always (only its interruptible jobs
// are canceled). none: never. Child pipelines are never chosen themselves: cancelling their
// parent cancels them.
const redundantPipelines = `
SELECT p.id, p.auto_cancel_on_new_commit FROM pipelines p
WHERE p.project_id = $1 AND p.ref = $2 AND p.id < $3 AND p.sha <> $4
  AND p.status IN ('created', 'pending', 'running', 'scheduled')
  AND p.parent_build_id IS NULL -- a child goes with its parent's cancel
  AND (p.auto_cancel_on_new_commit = 'interruptible'
    OR p.auto_cancel_on_new_commit = 'conservative' AND NOT EXISTS (
      SELECT 1 FROM builds b
      WHERE b.pipeline_id = p.id
        AND b.status IN ('waiting_for_runner_ack', 'running', 'success', 'failed')
        AND NOT coalesce((b.payload ->> 'interruptible')::boolean, false)))
ORDER BY p.id
LIMIT $5`

// RedundantPipelines lists up to limit pipelines that pipeline id (of sha on ref) makes
// redundant, oldest first.
func (s *Store) RedundantPipelines(ctx context.Context, projectID int64, ref, sha string, id int64, limit int) ([]builds.Redundant, error) {
	rows, err := s.pool.Query(ctx, redundantPipelines, projectID, ref, id, sha, limit)
	if err != nil {
		return nil, fmt.Errorf("redundant pipelines of pipeline %d: %w", id, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Redundant, error) {
		var r builds.Redundant
		err := row.Scan(&r.ID, &r.OnNewCommit)
		return r, err
	})
}

// failedToCancel finds pipelines that on_job_failure: all should have canceled: a latest
// attempt failed, not allowed to, and something is left to cancel. The finishing replica
// cancels at once; this is the net under it (a finish by the reapers, the stuck check or a
// child pipeline's end, and a replica that stopped between its commit and the cancel). The
// partial index holds only alive pipelines with the setting.
const failedToCancel = `
SELECT p.project_id, p.id FROM pipelines p
WHERE p.auto_cancel_on_job_failure = 'all' AND p.status IN ('created', 'pending', 'running', 'manual', 'scheduled')
  AND EXISTS (SELECT 1 FROM builds b WHERE b.pipeline_id = p.id
      AND b.status = 'failed' AND NOT b.allow_failure AND b.retried_by IS NULL)
  AND EXISTS (SELECT 1 FROM builds b WHERE b.pipeline_id = p.id
      AND b.status IN ('created', 'manual', 'scheduled', 'waiting_for_resource', 'pending', 'waiting_for_runner_ack', 'running'))
ORDER BY p.id
LIMIT $1`

// FailedToCancel lists up to limit pipelines that on_job_failure: all cancels, oldest first.
func (s *Store) FailedToCancel(ctx context.Context, limit int) ([]builds.PipelineRef, error) {
	rows, err := s.pool.Query(ctx, failedToCancel, limit)
	if err != nil {
		return nil, fmt.Errorf("pipelines to cancel on a job failure: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.PipelineRef, error) {
		var r builds.PipelineRef
		err := row.Scan(&r.ProjectID, &r.ID)
		return r, err
	})
}
