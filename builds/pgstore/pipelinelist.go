package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/listings"
)

// pipelineCols are a pipeline's columns without its builds, read with its parent bridge's
// pipeline (scanPipeline's order).
const pipelineCols = `p.id, p.project_id, p.ref, p.sha, p.stages, p.timeout_strategy, p.status, p.created_at, p.updated_at,
    p.finished_at, p.iid, p.source, p.before_sha, p.variables, COALESCE(p.parent_build_id, 0), COALESCE(pb.pipeline_id, 0),
    p.depth, p.auto_cancel_on_new_commit, p.auto_cancel_on_job_failure, p.created_by`

func pipelineFields(p *builds.Pipeline) []any {
	return []any{&p.ID, &p.ProjectID, &p.Ref, &p.SHA, &p.Stages, &p.TimeoutStrategy, &p.Status, &p.CreatedAt, &p.UpdatedAt,
		&p.FinishedAt, &p.IID, &p.Source, &p.BeforeSHA, &p.Variables, &p.ParentBuildID, &p.ParentPipelineID, &p.Depth,
		&p.AutoCancel.OnNewCommit, &p.AutoCancel.OnJobFailure, &p.CreatedBy}
}

// listPipelines is GitLab's GET /projects/:id/pipelines: each filter is a bound parameter
// that is NULL when not given. $2 and $3 are status lists (scope, status), $4 the refs a
// ref filter matches, $8 branches or tags: only the newest pipeline of each such ref. The
// ORDER BY is one of pipelineOrders, chosen by name, never formatted from the request.
const listPipelinesHead = `
SELECT ` + pipelineCols + `, count(*) OVER ()
FROM pipelines p LEFT JOIN builds pb ON pb.id = p.parent_build_id
WHERE p.project_id = $1
  AND ($2::text[] IS NULL OR p.status = ANY($2))
  AND ($3::text[] IS NULL OR p.status = ANY($3))
  AND ($4::text[] IS NULL OR p.ref = ANY($4))
  AND ($5::text IS NULL OR p.sha = $5)
  AND ($6::text IS NULL OR p.source = $6)
  AND ($7::timestamptz IS NULL OR p.updated_at > $7)
  AND ($8::timestamptz IS NULL OR p.updated_at < $8)
  AND ($9::text IS NULL OR p.id IN (
      SELECT max(l.id) FROM pipelines l
      WHERE l.project_id = $1 AND (l.ref LIKE 'refs/tags/%') = ($9 = 'tags')
      GROUP BY l.ref))
ORDER BY `

const listPipelinesTail = ` LIMIT $10 OFFSET $11`

// pipelineOrders are the ORDER BY of each order_by and sort; id breaks ties.
var pipelineOrders = map[[2]string]string{
	{"id", "desc"}: "p.id DESC", {"id", "asc"}: "p.id ASC",
	{"status", "desc"}: "p.status DESC, p.id DESC", {"status", "asc"}: "p.status ASC, p.id ASC",
	{"ref", "desc"}: "p.ref DESC, p.id DESC", {"ref", "asc"}: "p.ref ASC, p.id ASC",
	{"updated_at", "desc"}: "p.updated_at DESC, p.id DESC", {"updated_at", "asc"}: "p.updated_at ASC, p.id ASC",
}

// ProjectPipelines lists a project's pipelines by f (checked by the service), without builds.
func (s *Store) ProjectPipelines(ctx context.Context, projectID int64, f listings.PipelineQuery, pg builds.Page) ([]builds.Pipeline, int, error) {
	orderBy, sort := f.OrderBy, f.Sort
	if orderBy == "" || orderBy == "user_id" {
		orderBy = "id" // no pipeline has a user: GitLab's order is then by id
	}
	if sort == "" {
		sort = "desc"
	}
	order, ok := pipelineOrders[[2]string{orderBy, sort}]
	if !ok {
		return nil, 0, fmt.Errorf("pipelines: order %s %s: %w", orderBy, sort, builds.ErrConflict)
	}
	scope, status := f.Statuses()
	var latestOf *string
	if f.Scope == "branches" || f.Scope == "tags" {
		latestOf = &f.Scope
	}
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, listPipelinesHead+order+listPipelinesTail, projectID, scope, status,
		listings.RefCandidates(f.Ref), nullString(f.SHA), nullString(f.Source), f.UpdatedAfter, f.UpdatedBefore, latestOf, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Pipeline, error) {
		var p builds.Pipeline
		err := row.Scan(append(pipelineFields(&p), &total)...)
		return p, err
	})
	if err == nil && len(list) == 0 && pg.Page > 1 {
		// Past the last page the window count is not there: count apart, with the filters.
		_, total, err = s.ProjectPipelines(ctx, projectID, f, builds.Page{Page: 1, PerPage: 1})
	}
	return list, total, err
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// latestPipeline is the newest pipeline of one of refs, a child pipeline left out (GitLab's
// project.ci_pipelines: parent_pipeline is not one of its sources).
const latestPipeline = `
SELECT id FROM pipelines WHERE project_id = $1 AND ref = ANY($2) AND source <> 'parent_pipeline'
  AND ($3 = '' OR sha = $3)
ORDER BY id DESC LIMIT 1`

// LatestPipeline returns the newest pipeline on one of refs (at sha unless "") with its
// builds.
func (s *Store) LatestPipeline(ctx context.Context, projectID int64, refs []string, sha string) (builds.Pipeline, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, latestPipeline, projectID, refs, sha).Scan(&id); err != nil {
		return builds.Pipeline{}, notFound(err, fmt.Sprintf("latest pipeline of %v", refs))
	}
	return s.Pipeline(ctx, projectID, id)
}

// retryableOfPipeline locks the latest failed and canceled builds of a pipeline, by stage.
// The builds are locked before the pipeline, in the order Finish and RetryBuild take them.
const retryableOfPipeline = `
SELECT b.id, b.stage_idx FROM builds b JOIN pipelines p ON p.id = b.pipeline_id
WHERE p.id = $1 AND p.project_id = $2 AND b.retried_by IS NULL AND b.status IN ('failed', 'canceled')
ORDER BY b.stage_idx, b.id
FOR UPDATE OF b`

const pipelineExists = `SELECT EXISTS (SELECT 1 FROM pipelines WHERE id = $1 AND project_id = $2)`

// advancedPastOf is read once the pipeline is locked (reopenAfter takes the lock).
const advancedPastOf = `SELECT advanced_past, per_job FROM pipelines WHERE id = $1`

// RetryPipeline creates a new attempt of each latest failed or canceled build of the
// pipeline in one transaction: pending for a stage the pipeline has reached, created (it
// waits its turn) for a later one or in a pipeline planned per job, where the planner
// releases it once its needs are met. What was skipped after a retried build comes back
// (reopenAfter), and the pipeline advances.
func (s *Store) RetryPipeline(ctx context.Context, projectID, id int64, now time.Time, actor string) ([]builds.Build, error) {
	var retried []builds.Build
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		retried = nil
		rows, err := tx.Query(ctx, retryableOfPipeline, id, projectID)
		if err != nil {
			return err
		}
		type target struct {
			id       int64
			stageIdx int
		}
		targets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (target, error) {
			var t target
			err := row.Scan(&t.id, &t.stageIdx)
			return t, err
		})
		if err != nil {
			return err
		}
		if len(targets) == 0 {
			var exists bool
			if err := tx.QueryRow(ctx, pipelineExists, id, projectID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("pipeline %d: %w", id, builds.ErrNotFound)
			}
			return nil
		}
		for _, t := range targets {
			if err := reopenAfter(ctx, tx, t.id, id, t.stageIdx, now); err != nil {
				return err
			}
		}
		var advancedPast int
		var perJob bool
		if err := tx.QueryRow(ctx, advancedPastOf, id).Scan(&advancedPast, &perJob); err != nil {
			return err
		}
		for _, t := range targets {
			held := perJob || t.stageIdx > advancedPast
			b, err := createRetry(ctx, tx, t.id, now, "operator", actor, held)
			if err != nil {
				return err
			}
			retried = append(retried, b)
		}
		_, err = advance(ctx, tx, id, now)
		return err
	})
	return retried, err
}

// pipelineForDelete locks the pipeline and says whether it and its builds have all
// finished; its builds are read with it.
const pipelineForDelete = `
SELECT status IN ('success', 'failed', 'canceled', 'skipped')
   AND NOT EXISTS (SELECT 1 FROM builds WHERE pipeline_id = $1
                   AND status NOT IN ('success', 'failed', 'canceled', 'skipped'))
FROM pipelines WHERE id = $1 AND project_id = $2 FOR UPDATE`

const buildsForDelete = `SELECT id, status FROM builds WHERE pipeline_id = $1 ORDER BY id`

// deletePipeline takes the builds with it (ON DELETE CASCADE: their events, log chunks,
// trace_archives rows, artifacts — whose trigger queues their objects for removal —
// and deployments); a child pipeline loses its parent bridge (SET NULL).
const deletePipeline = `DELETE FROM pipelines WHERE id = $1`

// DeletePipeline deletes a finished pipeline and returns what its builds were.
func (s *Store) DeletePipeline(ctx context.Context, projectID, id int64) ([]builds.Build, error) {
	var deleted []builds.Build
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var finished bool
		if err := tx.QueryRow(ctx, pipelineForDelete, id, projectID).Scan(&finished); err != nil {
			return notFound(err, fmt.Sprintf("pipeline %d", id))
		}
		if !finished {
			return fmt.Errorf("pipeline %d: %w", id, builds.ErrPipelineBusy)
		}
		rows, err := tx.Query(ctx, buildsForDelete, id)
		if err != nil {
			return err
		}
		deleted, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Build, error) {
			var b builds.Build
			err := row.Scan(&b.ID, &b.Status)
			return b, err
		})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, deletePipeline, id)
		return err
	})
	return deleted, err
}
