package pgstore

import (
	"context"
	"fmt"
)

// redundantPipelines is GitLab's choice of pipelines a new one makes redundant
// (Ci::PipelineCreation::CancelRedundantPipelinesService, on_new_commit: conservative):
// older pipelines of the project on the same ref, of another commit, still alive, in
// which no job that has started (taken by a runner, running or finished with a result) is
// uninterruptible. GitLab's STARTED_STATUSES are running, success and failed; jobapi's
// waiting_for_runner_ack is a job a runner has taken, so it counts as started too. Child
// pipelines are never chosen themselves: cancelling their parent cancels them.
const redundantPipelines = `
SELECT p.id FROM pipelines p
WHERE p.project_id = $1 AND p.ref = $2 AND p.id < $3 AND p.sha <> $4
  AND p.status IN ('created', 'pending', 'running', 'scheduled')
  AND p.parent_build_id IS NULL -- a child goes with its parent's cancel
  AND NOT EXISTS (
    SELECT 1 FROM builds b
    WHERE b.pipeline_id = p.id
      AND b.status IN ('waiting_for_runner_ack', 'running', 'success', 'failed')
      AND NOT coalesce((b.payload ->> 'interruptible')::boolean, false))
ORDER BY p.id
LIMIT $5`

// RedundantPipelines lists up to limit pipelines that pipeline id (of sha on ref) makes
// redundant, oldest first.
func (s *Store) RedundantPipelines(ctx context.Context, projectID int64, ref, sha string, id int64, limit int) ([]int64, error) {
	rows, err := s.pool.Query(ctx, redundantPipelines, projectID, ref, id, sha, limit)
	if err != nil {
		return nil, fmt.Errorf("redundant pipelines of pipeline %d: %w", id, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var pid int64
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		ids = append(ids, pid)
	}
	return ids, rows.Err()
}
