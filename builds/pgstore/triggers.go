package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/triggers"
)

var _ triggers.Store = (*Store)(nil)

const triggerCols = `id, project_id, description, token_last4, created_at, updated_at, last_used, owner`

func scanTrigger(row pgx.Row) (triggers.Trigger, error) {
	var t triggers.Trigger
	err := row.Scan(&t.ID, &t.ProjectID, &t.Description, &t.TokenLast4, &t.CreatedAt, &t.UpdatedAt, &t.LastUsed, &t.Owner)
	return t, err
}

// A trigger is created only for a project that exists (the foreign key refuses others).
const insertTrigger = `
INSERT INTO pipeline_triggers (project_id, description, token_hash, token_last4, created_at, updated_at, owner)
SELECT $1, $2, $3, $4, $5, $5, $6 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
RETURNING ` + triggerCols

// CreateTrigger stores a trigger with its token's hash.
func (s *Store) CreateTrigger(ctx context.Context, t triggers.Trigger, tokenHash []byte) (triggers.Trigger, error) {
	created, err := scanTrigger(s.pool.QueryRow(ctx, insertTrigger, t.ProjectID, t.Description, tokenHash, t.TokenLast4, t.CreatedAt, t.Owner))
	return created, notFound(err, fmt.Sprintf("project %d", t.ProjectID))
}

const triggersOf = `SELECT ` + triggerCols + `, count(*) OVER () FROM pipeline_triggers WHERE project_id = $1
ORDER BY id LIMIT $2 OFFSET $3`

// Triggers lists one page of a project's triggers, oldest first, and their total.
func (s *Store) Triggers(ctx context.Context, projectID int64, pg builds.Page) ([]triggers.Trigger, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, triggersOf, projectID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (triggers.Trigger, error) {
		var t triggers.Trigger
		err := row.Scan(&t.ID, &t.ProjectID, &t.Description, &t.TokenLast4, &t.CreatedAt, &t.UpdatedAt, &t.LastUsed, &t.Owner, &total)
		return t, err
	})
	if err != nil || len(list) > 0 {
		return list, total, err
	}
	// None on this page: no project, or past the last page (count apart).
	if _, err := s.Project(ctx, projectID); err != nil {
		return nil, 0, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM pipeline_triggers WHERE project_id = $1`, projectID).Scan(&total)
	return list, total, err
}

const triggerByID = `SELECT ` + triggerCols + ` FROM pipeline_triggers WHERE project_id = $1 AND id = $2`

// Trigger reads one of a project's triggers.
func (s *Store) Trigger(ctx context.Context, projectID, id int64) (triggers.Trigger, error) {
	t, err := scanTrigger(s.pool.QueryRow(ctx, triggerByID, projectID, id))
	return t, notFound(err, fmt.Sprintf("trigger %d of project %d", id, projectID))
}

const updateTrigger = `UPDATE pipeline_triggers SET description = $3, updated_at = $4
WHERE project_id = $1 AND id = $2 RETURNING ` + triggerCols

// UpdateTrigger changes a trigger's description.
func (s *Store) UpdateTrigger(ctx context.Context, projectID, id int64, description string, now time.Time) (triggers.Trigger, error) {
	t, err := scanTrigger(s.pool.QueryRow(ctx, updateTrigger, projectID, id, description, now))
	return t, notFound(err, fmt.Sprintf("trigger %d of project %d", id, projectID))
}

const deleteTrigger = `DELETE FROM pipeline_triggers WHERE project_id = $1 AND id = $2`

// DeleteTrigger removes a trigger.
func (s *Store) DeleteTrigger(ctx context.Context, projectID, id int64) error {
	tag, err := s.pool.Exec(ctx, deleteTrigger, projectID, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("trigger %d of project %d: %w", id, projectID, builds.ErrNotFound)
	}
	return err
}

const useTrigger = `UPDATE pipeline_triggers SET last_used = $2 WHERE token_hash = $1 RETURNING ` + triggerCols

// UseTrigger finds a trigger by its token and records the use.
func (s *Store) UseTrigger(ctx context.Context, tokenHash []byte, now time.Time) (triggers.Trigger, error) {
	t, err := scanTrigger(s.pool.QueryRow(ctx, useTrigger, tokenHash, now))
	return t, notFound(err, "trigger token")
}

// JobOnRunner finds the running build that holds a job token (buildByRunningToken: through
// the partial index of builds on a runner).
func (s *Store) JobOnRunner(ctx context.Context, tokenHash []byte) (builds.Build, error) {
	b, err := scanBuild(s.pool.QueryRow(ctx, buildByRunningToken, tokenHash))
	return b, notFound(err, "running job with the job token")
}
