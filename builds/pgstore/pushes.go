package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pushes"
)

var _ pushes.Store = (*Store)(nil)

// A project without a row has the defaults: no secret, no polling.
const pushSettingsOf = `
SELECT p.id, coalesce(s.webhook_secret, ''), coalesce(s.poll_interval_seconds, 0), s.polled_at,
       coalesce(s.poll_error, ''), coalesce(s.updated_at, p.updated_at)
FROM projects p LEFT JOIN push_settings s ON s.project_id = p.id
WHERE p.id = $1`

func scanPushSettings(row pgx.Row) (pushes.Settings, error) {
	var st pushes.Settings
	var seconds int64
	err := row.Scan(&st.ProjectID, &st.WebhookSecret, &seconds, &st.PolledAt, &st.PollError, &st.UpdatedAt)
	st.PollInterval = time.Duration(seconds) * time.Second
	return st, err
}

// PushSettings reads a project's push settings.
func (s *Store) PushSettings(ctx context.Context, projectID int64) (pushes.Settings, error) {
	st, err := scanPushSettings(s.pool.QueryRow(ctx, pushSettingsOf, projectID))
	return st, notFound(translate(err), fmt.Sprintf("project %d", projectID))
}

// NULL parameters keep the stored value. Polling turned on from off ($5) is due at once
// and unprimed (polled_at NULL); the same transaction forgets the heads polled before.
const upsertPushSettings = `
INSERT INTO push_settings AS s (project_id, webhook_secret, poll_interval_seconds, next_poll_at, updated_at)
SELECT $1, coalesce($2, ''), coalesce($3, 0), $4, $4 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id) DO UPDATE SET
    webhook_secret        = coalesce($2, s.webhook_secret),
    poll_interval_seconds = coalesce($3, s.poll_interval_seconds),
    polled_at    = CASE WHEN $5 THEN NULL ELSE s.polled_at END,
    next_poll_at = CASE WHEN $3::integer IS NOT NULL AND $3::integer <> s.poll_interval_seconds THEN $4 ELSE s.next_poll_at END,
    poll_error   = CASE WHEN coalesce($3, s.poll_interval_seconds) = 0 THEN '' ELSE s.poll_error END,
    updated_at   = $4`

const (
	pollIntervalForUpdate = `SELECT poll_interval_seconds FROM push_settings WHERE project_id = $1 FOR UPDATE`
	forgetPushHeads       = `DELETE FROM push_heads WHERE project_id = $1`
)

// UpdatePushSettings applies c.
func (s *Store) UpdatePushSettings(ctx context.Context, projectID int64, c pushes.Change, now time.Time) (pushes.Settings, error) {
	var seconds *int64
	if c.PollInterval != nil {
		v := int64(c.PollInterval.Seconds())
		seconds = &v
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var old int64
		if err := tx.QueryRow(ctx, pollIntervalForUpdate, projectID).Scan(&old); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		turnedOn := old == 0 && seconds != nil && *seconds > 0
		tag, err := tx.Exec(ctx, upsertPushSettings, projectID, c.WebhookSecret, seconds, now, turnedOn)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return pgx.ErrNoRows // no such project
		}
		if turnedOn {
			_, err = tx.Exec(ctx, forgetPushHeads, projectID)
		}
		return err
	})
	if err != nil {
		return pushes.Settings{}, notFound(err, fmt.Sprintf("project %d", projectID))
	}
	return s.PushSettings(ctx, projectID)
}

const claimDelivery = `
INSERT INTO webhook_deliveries (project_id, forge, delivery_id, event, received_at)
SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id, forge, delivery_id) DO NOTHING
RETURNING true`

const deliveryOf = `
SELECT event, received_at, coalesce(pipeline_id, 0) FROM webhook_deliveries
WHERE project_id = $1 AND forge = $2 AND delivery_id = $3`

// ClaimDelivery records d unless its id was claimed before.
func (s *Store) ClaimDelivery(ctx context.Context, d pushes.Delivery) (pushes.Delivery, bool, error) {
	var inserted bool
	err := s.pool.QueryRow(ctx, claimDelivery, d.ProjectID, d.Forge, d.ID, d.Event, d.ReceivedAt).Scan(&inserted)
	if err == nil {
		return d, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return pushes.Delivery{}, false, translate(err)
	}
	earlier := pushes.Delivery{ProjectID: d.ProjectID, Forge: d.Forge, ID: d.ID}
	err = s.pool.QueryRow(ctx, deliveryOf, d.ProjectID, d.Forge, d.ID).Scan(&earlier.Event, &earlier.ReceivedAt, &earlier.PipelineID)
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing was inserted and nothing is there: the project does not exist, or the
		// earlier claim was just released (its pipeline failed): either way, not claimed.
		if _, perr := s.Project(ctx, d.ProjectID); perr != nil {
			return pushes.Delivery{}, false, perr
		}
		return pushes.Delivery{}, false, fmt.Errorf("delivery %s of project %d was released while claimed: %w", d.ID, d.ProjectID, builds.ErrConflict)
	}
	if err != nil {
		return pushes.Delivery{}, false, translate(err)
	}
	return earlier, false, nil
}

const deliveryCreated = `
UPDATE webhook_deliveries SET pipeline_id = $4 WHERE project_id = $1 AND forge = $2 AND delivery_id = $3`

// DeliveryCreated records the pipeline a claimed delivery created.
func (s *Store) DeliveryCreated(ctx context.Context, d pushes.Delivery, pipelineID int64) error {
	_, err := s.pool.Exec(ctx, deliveryCreated, d.ProjectID, d.Forge, d.ID, pipelineID)
	return translate(err)
}

const releaseDelivery = `
DELETE FROM webhook_deliveries WHERE project_id = $1 AND forge = $2 AND delivery_id = $3 AND pipeline_id IS NULL`

// ReleaseDelivery forgets a claim that created no pipeline.
func (s *Store) ReleaseDelivery(ctx context.Context, d pushes.Delivery) error {
	_, err := s.pool.Exec(ctx, releaseDelivery, d.ProjectID, d.Forge, d.ID)
	return translate(err)
}

const pruneDeliveries = `
DELETE FROM webhook_deliveries WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM webhook_deliveries WHERE received_at < $1 LIMIT $2))`

// PruneDeliveries forgets claims received before before, at most limit.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, pruneDeliveries, before, limit)
	return int(tag.RowsAffected()), translate(err)
}

// SKIP LOCKED: passes on other replicas take other projects instead of waiting; the
// UPDATE moves next_poll_at an interval on, so that none takes these again before then.
const claimPolls = `
UPDATE push_settings s SET next_poll_at = $1 + make_interval(secs => s.poll_interval_seconds)
FROM projects p
WHERE p.id = s.project_id AND s.project_id IN (
    SELECT project_id FROM push_settings
    WHERE poll_interval_seconds > 0 AND next_poll_at <= $1
    ORDER BY next_poll_at LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING s.project_id, p.repo_url, s.polled_at IS NOT NULL`

func scanPollTargets(rows pgx.Rows) ([]pushes.PollTarget, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (pushes.PollTarget, error) {
		var t pushes.PollTarget
		err := row.Scan(&t.ProjectID, &t.RepoURL, &t.Primed)
		return t, err
	})
}

// ClaimPolls takes up to limit projects due at now.
func (s *Store) ClaimPolls(ctx context.Context, now time.Time, limit int) ([]pushes.PollTarget, error) {
	rows, err := s.pool.Query(ctx, claimPolls, now, limit)
	if err != nil {
		return nil, translate(err)
	}
	targets, err := scanPollTargets(rows)
	return targets, translate(err)
}

const pollTargetOf = `
SELECT p.id, p.repo_url, coalesce(s.polled_at IS NOT NULL, false)
FROM projects p LEFT JOIN push_settings s ON s.project_id = p.id WHERE p.id = $1`

// PollTarget reads one project as a poll sees it.
func (s *Store) PollTarget(ctx context.Context, projectID int64) (pushes.PollTarget, error) {
	var t pushes.PollTarget
	err := s.pool.QueryRow(ctx, pollTargetOf, projectID).Scan(&t.ProjectID, &t.RepoURL, &t.Primed)
	return t, notFound(translate(err), fmt.Sprintf("project %d", projectID))
}

const headsOf = `SELECT ref, sha FROM push_heads WHERE project_id = $1`

// Heads are the heads recorded for a project.
func (s *Store) Heads(ctx context.Context, projectID int64) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, headsOf, projectID)
	if err != nil {
		return nil, translate(err)
	}
	heads := map[string]string{}
	var ref, sha string
	_, err = pgx.ForEachRow(rows, []any{&ref, &sha}, func() error {
		heads[ref] = sha
		return nil
	})
	return heads, translate(err)
}

const recordHeads = `
INSERT INTO push_heads (project_id, ref, sha, updated_at)
SELECT $1, r.ref, r.sha, $4 FROM unnest($2::text[], $3::text[]) AS r (ref, sha)
WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id, ref) DO NOTHING`

// RecordHeads records heads not recorded yet.
func (s *Store) RecordHeads(ctx context.Context, projectID int64, heads []pushes.Head, now time.Time) error {
	refs, shas := make([]string, len(heads)), make([]string, len(heads))
	for i, h := range heads {
		refs[i], shas[i] = h.Ref, h.SHA
	}
	_, err := s.pool.Exec(ctx, recordHeads, projectID, refs, shas, now)
	return translate(err)
}

const (
	insertHead = `
INSERT INTO push_heads (project_id, ref, sha, updated_at)
SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id, ref) DO NOTHING`
	moveHead = `
UPDATE push_heads SET sha = $4, updated_at = $5 WHERE project_id = $1 AND ref = $2 AND sha = $3`
	deleteHead = `DELETE FROM push_heads WHERE project_id = $1 AND ref = $2 AND sha = $3`
)

// MoveHead moves ref from old to new by compare-and-set.
func (s *Store) MoveHead(ctx context.Context, projectID int64, ref, old, new string, now time.Time) (bool, error) {
	var err error
	var n int64
	switch {
	case old == "":
		tag, e := s.pool.Exec(ctx, insertHead, projectID, ref, new, now)
		n, err = tag.RowsAffected(), e
	case new == "":
		tag, e := s.pool.Exec(ctx, deleteHead, projectID, ref, old)
		n, err = tag.RowsAffected(), e
	default:
		tag, e := s.pool.Exec(ctx, moveHead, projectID, ref, old, new, now)
		n, err = tag.RowsAffected(), e
	}
	return n == 1, translate(err)
}

// A project polled on demand (POST …/push_settings/poll) may have no settings row yet: the
// poll makes one, so that the next poll compares with the heads this one recorded.
const (
	polled = `
INSERT INTO push_settings AS s (project_id, polled_at, poll_error, updated_at)
SELECT $1, $2, $3, $2 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id) DO UPDATE SET polled_at = $2, poll_error = $3`
	pollFailed = `
INSERT INTO push_settings AS s (project_id, poll_error)
SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM projects WHERE id = $1)
ON CONFLICT (project_id) DO UPDATE SET poll_error = $2`
)

// Polled records a poll that read the remote.
func (s *Store) Polled(ctx context.Context, projectID int64, at time.Time, failure string) error {
	_, err := s.pool.Exec(ctx, polled, projectID, at, failure)
	return translate(err)
}

// PollFailed records a poll that could not read the remote.
func (s *Store) PollFailed(ctx context.Context, projectID int64, failure string) error {
	_, err := s.pool.Exec(ctx, pollFailed, projectID, failure)
	return translate(err)
}
