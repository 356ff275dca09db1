package pgstore

import (
	"context"
	"fmt"

	"github.com/jobapi/jobapi/builds"
)

const pipelineProgress = `
SELECT p.status,
       (SELECT count(*) FROM builds b WHERE b.pipeline_id = p.id AND b.retried_by IS NULL
            AND b.status NOT IN ('success', 'failed', 'canceled', 'skipped')
            AND NOT (b.status = 'manual' AND b.allow_failure))::int,
       COALESCE((SELECT array_agg(b.id ORDER BY b.id) FROM builds b WHERE b.pipeline_id = p.id
            AND b.status IN ('success', 'failed', 'canceled', 'skipped')), '{}')
FROM pipelines p WHERE p.id = $1 AND p.project_id = $2`

// PipelineProgress reads a pipeline's status, how many latest attempts are unfinished, and
// every finished build id, in one statement (one snapshot). An optional manual job (manual
// with allow_failure) is not counted: the pipeline can end without it, so a waiter that
// loops on jobs_remaining reaches 0 with it never played.
func (s *Store) PipelineProgress(ctx context.Context, projectID, id int64) (builds.PipelineProgress, error) {
	var p builds.PipelineProgress
	err := s.pool.QueryRow(ctx, pipelineProgress, id, projectID).Scan(&p.Status, &p.Remaining, &p.Finished)
	if err != nil {
		return p, notFound(err, fmt.Sprintf("pipeline %d", id))
	}
	return p, nil
}
