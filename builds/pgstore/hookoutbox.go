package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/forgestatus"
	"github.com/jobapi/jobapi/builds/hooks"
)

var _ hooks.Outbox = (*Store)(nil)

// ---- forge status settings

const forgeCols = `project_id, forge, api_url, repository, token, context, created_at, updated_at`

func forgeDest(f *forgestatus.Settings) []any {
	return []any{&f.ProjectID, &f.Forge, &f.APIURL, &f.Repository, &f.Token, &f.Context, &f.CreatedAt, &f.UpdatedAt}
}

// ForgeStatus reads a project's forge status settings.
func (s *Store) ForgeStatus(ctx context.Context, projectID int64) (forgestatus.Settings, error) {
	var f forgestatus.Settings
	err := s.pool.QueryRow(ctx, `SELECT `+forgeCols+` FROM forge_status_settings WHERE project_id = $1`, projectID).Scan(forgeDest(&f)...)
	return f, notFound(err, fmt.Sprintf("forge status settings of project %d", projectID))
}

// putForge creates or replaces a project's settings; new ones receive the events after the
// newest one written so far.
const putForge = `
INSERT INTO forge_status_settings (project_id, forge, api_url, repository, token, context, since_event_id, created_at, updated_at)
SELECT $1, $2, $3, $4, $5, $6, (SELECT coalesce(max(id), 0) FROM build_events), $7, $8
WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id) DO UPDATE SET forge = excluded.forge, api_url = excluded.api_url,
    repository = excluded.repository, token = excluded.token, context = excluded.context, updated_at = excluded.updated_at
RETURNING ` + forgeCols

// PutForgeStatus writes a project's forge status settings.
func (s *Store) PutForgeStatus(ctx context.Context, f forgestatus.Settings) (forgestatus.Settings, error) {
	var out forgestatus.Settings
	err := s.pool.QueryRow(ctx, putForge, f.ProjectID, f.Forge, f.APIURL, f.Repository, f.Token, f.Context, f.CreatedAt,
		f.UpdatedAt).Scan(forgeDest(&out)...)
	return out, notFound(err, fmt.Sprintf("project %d", f.ProjectID))
}

// DeleteForgeStatus removes a project's settings and the statuses not yet sent.
func (s *Store) DeleteForgeStatus(ctx context.Context, projectID int64) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM forge_status_settings WHERE project_id = $1`, projectID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("forge status settings of project %d: %w", projectID, builds.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `DELETE FROM hook_deliveries WHERE project_id = $1 AND target = $2 AND state = 'pending'`,
			projectID, hooks.ForgeStatusTarget)
		return err
	})
}

// ---- the event pass

const readCursor = `SELECT safe_id, seen_id, seen_at, now(), (SELECT coalesce(max(id), 0) FROM build_events),
    EXISTS (SELECT 1 FROM project_hooks) OR EXISTS (SELECT 1 FROM forge_status_settings)
FROM hook_event_cursor`

// eventsOfTargets reads the events after the cursor up to the head, of projects with a
// hook or a forge: a walk of build_events' primary key from the cursor, each event's build
// read by its own.
const eventsOfTargets = `
SELECT e.id, e.build_id, b.pipeline_id, b.project_id
FROM build_events e JOIN builds b ON b.id = e.build_id
WHERE e.id > $1 AND e.id <= $2
  AND b.project_id IN (SELECT project_id FROM project_hooks UNION SELECT project_id FROM forge_status_settings)
ORDER BY e.id LIMIT $3`

// ScanHookEvents reads the events after the cursor, of projects with targets, and the targets.
func (s *Store) ScanHookEvents(ctx context.Context, limit int) (hooks.Scan, error) {
	var sc hooks.Scan
	c := &sc.Cursor
	if err := s.pool.QueryRow(ctx, readCursor).Scan(&c.SafeID, &c.SeenID, &c.SeenAt, &sc.Now, &sc.HeadID, &sc.AnyTargets); err != nil {
		return sc, err
	}
	if !sc.AnyTargets || sc.HeadID <= c.SafeID {
		return sc, nil
	}
	rows, err := s.pool.Query(ctx, eventsOfTargets, c.SafeID, sc.HeadID, limit)
	if err != nil {
		return sc, err
	}
	sc.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (hooks.Touched, error) {
		var t hooks.Touched
		err := row.Scan(&t.EventID, &t.BuildID, &t.PipelineID, &t.ProjectID)
		return t, err
	})
	if err != nil || len(sc.Events) == 0 {
		return sc, err
	}
	var ids []int64
	seen := map[int64]bool{}
	for _, e := range sc.Events {
		if !seen[e.ProjectID] {
			seen[e.ProjectID] = true
			ids = append(ids, e.ProjectID)
		}
	}
	sc.Targets, err = s.targets(ctx, ids)
	return sc, err
}

func (s *Store) targets(ctx context.Context, projectIDs []int64) (map[int64]hooks.Targets, error) {
	out := map[int64]hooks.Targets{}
	rows, err := s.pool.Query(ctx, `SELECT `+hookCols+`, since_event_id FROM project_hooks WHERE project_id = ANY($1) ORDER BY id`, projectIDs)
	if err != nil {
		return nil, err
	}
	hs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hooks.TargetHook, error) {
		var th hooks.TargetHook
		err := row.Scan(append(hookDest(&th.Hook), &th.SinceEventID)...)
		return th, err
	})
	if err != nil {
		return nil, err
	}
	for _, th := range hs {
		t := out[th.ProjectID]
		t.Hooks = append(t.Hooks, th)
		out[th.ProjectID] = t
	}
	rows, err = s.pool.Query(ctx, `SELECT `+forgeCols+`, since_event_id FROM forge_status_settings WHERE project_id = ANY($1)`, projectIDs)
	if err != nil {
		return nil, err
	}
	fs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hooks.TargetForge, error) {
		var tf hooks.TargetForge
		err := row.Scan(append(forgeDest(&tf.Settings), &tf.SinceEventID)...)
		return tf, err
	})
	if err != nil {
		return nil, err
	}
	for _, tf := range fs {
		t := out[tf.ProjectID]
		t.Forge = &tf
		out[tf.ProjectID] = t
	}
	return out, nil
}

// insertDelivery writes a delivery unless its key is there, and only while its target
// exists (a hook deleted since the pass read it takes its events with it).
const insertDelivery = `
INSERT INTO hook_deliveries (project_id, hook_id, target, event, dedupe_key, uuid, payload, state, attempts,
    next_attempt_at, created_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11
WHERE CASE WHEN $2::bigint IS NULL THEN EXISTS (SELECT 1 FROM forge_status_settings WHERE project_id = $1)
      ELSE EXISTS (SELECT 1 FROM project_hooks WHERE id = $2) END
ON CONFLICT (project_id, target, dedupe_key) DO NOTHING
RETURNING id`

func deliveryArgs(d hooks.Delivery) []any {
	var hookID *int64
	target := hooks.ForgeStatusTarget
	if d.HookID != 0 {
		hookID, target = &d.HookID, hooks.HookTarget(d.HookID)
	}
	return []any{d.ProjectID, hookID, target, d.Event, d.Key, d.UUID, []byte(d.Payload), d.State, d.Attempts,
		d.NextAttemptAt, d.CreatedAt}
}

// EnqueueHookDeliveries writes the new deliveries and moves the cursor, in one transaction.
func (s *Store) EnqueueHookDeliveries(ctx context.Context, ds []hooks.Delivery, old, next hooks.Cursor) (int, error) {
	n := 0
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		n = 0
		batch := &pgx.Batch{}
		for _, d := range ds {
			batch.Queue(insertDelivery, deliveryArgs(d)...)
		}
		if next != old {
			batch.Queue(`UPDATE hook_event_cursor SET safe_id = $3, seen_id = $4, seen_at = $5
WHERE safe_id = $1 AND seen_id = $2`, old.SafeID, old.SeenID, next.SafeID, next.SeenID, next.SeenAt)
		}
		br := tx.SendBatch(ctx, batch)
		for range ds {
			tag, err := br.Exec()
			if err != nil {
				_ = br.Close()
				return err
			}
			n += int(tag.RowsAffected())
		}
		return br.Close()
	})
	return n, err
}

// ---- the sender

const claimedDeliveryCols = `c.id, c.project_id, coalesce(c.hook_id, 0), c.event, c.dedupe_key, c.uuid, c.payload, c.state,
    c.attempts, c.next_attempt_at, c.created_at, c.finished_at`

// claimDue takes due deliveries oldest first, skipping those another replica is claiming,
// and leases them ($2 seconds); each row comes with its target as it is now.
const claimDue = `
WITH due AS (
    SELECT id FROM hook_deliveries WHERE state = 'pending' AND next_attempt_at <= $1
    ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE hook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $1 + make_interval(secs => $2)
    FROM due WHERE d.id = due.id
    RETURNING d.*
)
SELECT ` + claimedDeliveryCols + `, h.id IS NOT NULL, h.id, h.project_id, h.uuid, h.url, h.name, h.description, h.token,
    h.push_events, h.tag_push_events, h.pipeline_events, h.job_events, h.push_events_branch_filter,
    h.branch_filter_strategy, h.enable_ssl_verification, h.created_at, h.updated_at, h.recent_failures, h.disabled_until,
    f.project_id IS NOT NULL, f.project_id, f.forge, f.api_url, f.repository, f.token, f.context, f.created_at, f.updated_at
FROM c LEFT JOIN project_hooks h ON h.id = c.hook_id
LEFT JOIN forge_status_settings f ON c.hook_id IS NULL AND f.project_id = c.project_id
ORDER BY c.next_attempt_at, c.id`

// ClaimHookDeliveries leases up to limit due deliveries.
func (s *Store) ClaimHookDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]hooks.Claimed, error) {
	rows, err := s.pool.Query(ctx, claimDue, now, lease.Seconds(), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanClaimedDelivery)
}

func scanClaimedDelivery(row pgx.CollectableRow) (hooks.Claimed, error) {
	var c hooks.Claimed
	var h nullHook
	var f nullForge
	d := &c.Delivery
	dest := []any{&d.ID, &d.ProjectID, &d.HookID, &d.Event, &d.Key, &d.UUID, &d.Payload, &d.State, &d.Attempts,
		&d.NextAttemptAt, &d.CreatedAt, &d.FinishedAt, &h.ok}
	dest = append(dest, h.dest()...)
	dest = append(dest, &f.ok)
	dest = append(dest, f.dest()...)
	if err := row.Scan(dest...); err != nil {
		return c, err
	}
	c.Hook, c.Forge = h.value(), f.value()
	return c, nil
}

// nullHook and nullForge read the columns of a LEFT JOIN that may have found nothing.
type nullHook struct {
	ok                                                    bool
	id, projectID                                         *int64
	uuid, url, name, description, token, filter, strategy *string
	push, tagPush, pipeline, job, ssl                     *bool
	createdAt, updatedAt                                  *time.Time
	failures                                              *int
	disabledUntil                                         *time.Time
}

func (n *nullHook) dest() []any {
	return []any{&n.id, &n.projectID, &n.uuid, &n.url, &n.name, &n.description, &n.token, &n.push, &n.tagPush,
		&n.pipeline, &n.job, &n.filter, &n.strategy, &n.ssl, &n.createdAt, &n.updatedAt, &n.failures, &n.disabledUntil}
}

func (n *nullHook) value() *hooks.Hook {
	if !n.ok {
		return nil
	}
	return &hooks.Hook{ID: *n.id, ProjectID: *n.projectID, UUID: *n.uuid, URL: *n.url, Name: *n.name,
		Description: *n.description, Token: *n.token, PushEvents: *n.push, TagPushEvents: *n.tagPush,
		PipelineEvents: *n.pipeline, JobEvents: *n.job, PushEventsBranchFilter: *n.filter, BranchFilterStrategy: *n.strategy,
		EnableSSLVerification: *n.ssl, CreatedAt: *n.createdAt, UpdatedAt: *n.updatedAt, RecentFailures: *n.failures,
		DisabledUntil: n.disabledUntil}
}

type nullForge struct {
	ok                                        bool
	projectID                                 *int64
	forge, apiURL, repository, token, context *string
	createdAt, updatedAt                      *time.Time
}

func (n *nullForge) dest() []any {
	return []any{&n.projectID, &n.forge, &n.apiURL, &n.repository, &n.token, &n.context, &n.createdAt, &n.updatedAt}
}

func (n *nullForge) value() *forgestatus.Settings {
	if !n.ok {
		return nil
	}
	return &forgestatus.Settings{ProjectID: *n.projectID, Forge: *n.forge, APIURL: *n.apiURL, Repository: *n.repository,
		Token: *n.token, Context: *n.context, CreatedAt: *n.createdAt, UpdatedAt: *n.updatedAt}
}

// RecordHookAttempt logs an attempt and moves its delivery on, unless another worker holds it
// now (its attempt count moved past this one).
func (s *Store) RecordHookAttempt(ctx context.Context, a hooks.Attempt, state string, next time.Time) error {
	var code *int
	if a.StatusCode != 0 {
		code = &a.StatusCode
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO hook_delivery_attempts (delivery_id, attempt, url, started_at, duration_ms,
    status_code, error, response_body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
			a.DeliveryID, a.Attempt, a.URL, a.StartedAt, float64(a.Duration)/float64(time.Millisecond), code, a.Error,
			a.ResponseBody); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE hook_deliveries SET state = $3, next_attempt_at = $4,
    finished_at = CASE WHEN $3 = 'pending' THEN NULL ELSE $5::timestamptz END
WHERE id = $1 AND attempts = $2 AND state = 'pending'`, a.DeliveryID, a.Attempt, state, next, a.StartedAt.Add(a.Duration))
		return err
	})
}

// AddHookDelivery writes a test delivery, claimed by its caller (attempt 1, leased a minute).
func (s *Store) AddHookDelivery(ctx context.Context, d hooks.Delivery) (hooks.Claimed, error) {
	d.Attempts, d.State, d.NextAttemptAt = 1, hooks.StatePending, d.CreatedAt.Add(time.Minute)
	var id int64
	if err := s.pool.QueryRow(ctx, insertDelivery, deliveryArgs(d)...).Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return hooks.Claimed{}, fmt.Errorf("hook %d: %w", d.HookID, builds.ErrNotFound)
		}
		return hooks.Claimed{}, err
	}
	d.ID = id
	h, err := s.Hook(ctx, d.ProjectID, d.HookID)
	if err != nil {
		return hooks.Claimed{}, err
	}
	return hooks.Claimed{Delivery: d, Hook: &h}, nil
}

// PruneHookDeliveries removes finished deliveries older than before, with their log.
func (s *Store) PruneHookDeliveries(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM hook_deliveries WHERE id IN (
    SELECT id FROM hook_deliveries WHERE state <> 'pending' AND finished_at < $1 LIMIT $2)`, before, limit)
	return int(tag.RowsAffected()), err
}

// NewestPipeline reads the project's newest pipeline with its builds.
func (s *Store) NewestPipeline(ctx context.Context, projectID int64) (builds.Pipeline, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT id FROM pipelines WHERE project_id = $1 ORDER BY id DESC LIMIT 1`, projectID).Scan(&id)
	if err != nil {
		return builds.Pipeline{}, notFound(err, fmt.Sprintf("pipelines of project %d", projectID))
	}
	return s.Pipeline(ctx, projectID, id)
}
