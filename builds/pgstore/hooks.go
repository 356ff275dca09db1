package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/hooks"
)

var (
	_ hooks.Store       = (*Store)(nil)
	_ hooks.DeliveryLog = (*Store)(nil)
)

const hookCols = `id, project_id, uuid, url, name, description, token, push_events, tag_push_events,
    pipeline_events, job_events, push_events_branch_filter, branch_filter_strategy,
    enable_ssl_verification, created_at, updated_at, recent_failures, disabled_until`

func hookDest(h *hooks.Hook) []any {
	return []any{&h.ID, &h.ProjectID, &h.UUID, &h.URL, &h.Name, &h.Description, &h.Token, &h.PushEvents,
		&h.TagPushEvents, &h.PipelineEvents, &h.JobEvents, &h.PushEventsBranchFilter, &h.BranchFilterStrategy,
		&h.EnableSSLVerification, &h.CreatedAt, &h.UpdatedAt, &h.RecentFailures, &h.DisabledUntil}
}

func scanHook(row pgx.Row) (hooks.Hook, error) {
	var h hooks.Hook
	err := row.Scan(hookDest(&h)...)
	return h, err
}

// A hook is created only for a project that exists; it receives the events after the
// newest one written so far (since_event_id), none from before.
const insertHook = `
INSERT INTO project_hooks (project_id, uuid, url, name, description, token, push_events, tag_push_events,
    pipeline_events, job_events, push_events_branch_filter, branch_filter_strategy, enable_ssl_verification,
    since_event_id, created_at, updated_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
    (SELECT coalesce(max(id), 0) FROM build_events), $14, $14
WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
RETURNING ` + hookCols

// CreateHook stores a new hook.
func (s *Store) CreateHook(ctx context.Context, h hooks.Hook) (hooks.Hook, error) {
	created, err := scanHook(s.pool.QueryRow(ctx, insertHook, h.ProjectID, h.UUID, h.URL, h.Name, h.Description, h.Token,
		h.PushEvents, h.TagPushEvents, h.PipelineEvents, h.JobEvents, h.PushEventsBranchFilter, h.BranchFilterStrategy,
		h.EnableSSLVerification, h.CreatedAt))
	return created, notFound(err, fmt.Sprintf("project %d", h.ProjectID))
}

const hooksOf = `SELECT ` + hookCols + `, count(*) OVER () FROM project_hooks WHERE project_id = $1
ORDER BY id LIMIT $2 OFFSET $3`

// Hooks lists one page of a project's hooks, oldest first, and their total.
func (s *Store) Hooks(ctx context.Context, projectID int64, pg builds.Page) ([]hooks.Hook, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, hooksOf, projectID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hooks.Hook, error) {
		var h hooks.Hook
		err := row.Scan(append(hookDest(&h), &total)...)
		return h, err
	})
	if err != nil || len(list) > 0 {
		return list, total, err
	}
	// None on this page: no project, or past the last page (count apart).
	if _, err := s.Project(ctx, projectID); err != nil {
		return nil, 0, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM project_hooks WHERE project_id = $1`, projectID).Scan(&total)
	return list, total, err
}

const hookByID = `SELECT ` + hookCols + ` FROM project_hooks WHERE project_id = $1 AND id = $2`

// Hook reads one of a project's hooks.
func (s *Store) Hook(ctx context.Context, projectID, id int64) (hooks.Hook, error) {
	h, err := scanHook(s.pool.QueryRow(ctx, hookByID, projectID, id))
	return h, notFound(err, fmt.Sprintf("hook %d of project %d", id, projectID))
}

const updateHook = `
UPDATE project_hooks SET url = $3, name = $4, description = $5, token = $6, push_events = $7,
    tag_push_events = $8, pipeline_events = $9, job_events = $10, push_events_branch_filter = $11,
    branch_filter_strategy = $12, enable_ssl_verification = $13, updated_at = $14,
    recent_failures = 0, disabled_until = NULL
WHERE project_id = $1 AND id = $2
RETURNING ` + hookCols

// UpdateHook writes a hook's fields and re-enables it (GitLab: an edit does).
func (s *Store) UpdateHook(ctx context.Context, h hooks.Hook) (hooks.Hook, error) {
	updated, err := scanHook(s.pool.QueryRow(ctx, updateHook, h.ProjectID, h.ID, h.URL, h.Name, h.Description, h.Token,
		h.PushEvents, h.TagPushEvents, h.PipelineEvents, h.JobEvents, h.PushEventsBranchFilter, h.BranchFilterStrategy,
		h.EnableSSLVerification, h.UpdatedAt))
	return updated, notFound(err, fmt.Sprintf("hook %d of project %d", h.ID, h.ProjectID))
}

// DeleteHook removes a hook; its deliveries and their log go with it (ON DELETE CASCADE).
func (s *Store) DeleteHook(ctx context.Context, projectID, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM project_hooks WHERE project_id = $1 AND id = $2`, projectID, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("hook %d of project %d: %w", id, projectID, builds.ErrNotFound)
	}
	return err
}

const attemptCols = `a.delivery_id, a.attempt, a.url, a.started_at, a.duration_ms, coalesce(a.status_code, 0), a.error,
    a.response_body, d.project_id, coalesce(d.hook_id, 0), d.event, d.dedupe_key, d.uuid, d.payload, d.state,
    d.attempts, d.next_attempt_at, d.created_at, d.finished_at`

// attemptsOf lists the attempts of one target's deliveries, newest first ($2: the target).
const attemptsOf = `SELECT ` + attemptCols + `, count(*) OVER ()
FROM hook_delivery_attempts a JOIN hook_deliveries d ON d.id = a.delivery_id
WHERE d.project_id = $1 AND d.target = $2
ORDER BY a.started_at DESC, a.delivery_id DESC, a.attempt DESC LIMIT $3 OFFSET $4`

func (s *Store) attempts(ctx context.Context, projectID int64, target string, pg builds.Page) ([]hooks.LoggedAttempt, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, attemptsOf, projectID, target, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hooks.LoggedAttempt, error) {
		var a hooks.LoggedAttempt
		var ms float64
		d := &a.Delivery
		err := row.Scan(&a.DeliveryID, &a.Attempt.Attempt, &a.URL, &a.StartedAt, &ms, &a.StatusCode, &a.Error, &a.ResponseBody,
			&d.ProjectID, &d.HookID, &d.Event, &d.Key, &d.UUID, &d.Payload, &d.State, &d.Attempts, &d.NextAttemptAt,
			&d.CreatedAt, &d.FinishedAt, &total)
		d.ID = a.DeliveryID
		a.Duration = msDuration(ms)
		return a, err
	})
	if err != nil || len(list) > 0 {
		return list, total, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM hook_delivery_attempts a JOIN hook_deliveries d ON d.id = a.delivery_id
WHERE d.project_id = $1 AND d.target = $2`, projectID, target).Scan(&total)
	return list, total, err
}

func msDuration(ms float64) time.Duration {
	return time.Duration(max(ms, 0) * float64(time.Millisecond))
}

// HookAttempts lists one page of a hook's delivery attempts, newest first.
func (s *Store) HookAttempts(ctx context.Context, projectID, hookID int64, pg builds.Page) ([]hooks.LoggedAttempt, int, error) {
	if _, err := s.Hook(ctx, projectID, hookID); err != nil {
		return nil, 0, err
	}
	return s.attempts(ctx, projectID, hooks.HookTarget(hookID), pg)
}

// ForgeStatusAttempts lists one page of a project's commit status attempts, newest first.
func (s *Store) ForgeStatusAttempts(ctx context.Context, projectID int64, pg builds.Page) ([]hooks.LoggedAttempt, int, error) {
	if _, err := s.Project(ctx, projectID); err != nil {
		return nil, 0, err
	}
	return s.attempts(ctx, projectID, hooks.ForgeStatusTarget, pg)
}

// RecordHookResult counts a delivery's outcome for the hook; the row is locked so that
// replicas sending to the same hook at once count every failure once.
func (s *Store) RecordHookResult(ctx context.Context, hookID int64, ok bool, now time.Time, disableFor func(int) time.Duration) error {
	if ok {
		_, err := s.pool.Exec(ctx, `UPDATE project_hooks SET recent_failures = 0, disabled_until = NULL
WHERE id = $1 AND (recent_failures <> 0 OR disabled_until IS NOT NULL)`, hookID)
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var failures int
		var until *time.Time
		err := tx.QueryRow(ctx, `SELECT recent_failures, disabled_until FROM project_hooks WHERE id = $1 FOR UPDATE`, hookID).
			Scan(&failures, &until)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		// A failure of a request sent before the hook was disabled does not count again.
		if failures >= hooks.PermanentlyDisableAfter || (until != nil && now.Before(*until)) {
			return nil
		}
		failures++
		until = nil
		if d := disableFor(failures); d > 0 && failures < hooks.PermanentlyDisableAfter {
			t := now.Add(d)
			until = &t
		}
		_, err = tx.Exec(ctx, `UPDATE project_hooks SET recent_failures = $2, disabled_until = $3 WHERE id = $1`,
			hookID, failures, until)
		return err
	})
}
