package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/runners"
)

var _ runners.Store = (*Store)(nil)

// runnerCols ends with the runner's current token expiry; runnerByTokenHash puts the
// presented token's in its place.
const runnerCols = `r.id, r.description, r.tags, r.run_untagged, r.paused, r.access_level, r.created_at, r.contacted_at,
    r.registration_type = 'registration_token', r.token_expires_at`

func scanRunner(row pgx.Row) (builds.Runner, error) {
	var r builds.Runner
	err := row.Scan(&r.ID, &r.Description, &r.Tags, &r.RunUntagged, &r.Paused, &r.AccessLevel, &r.CreatedAt, &r.ContactedAt,
		&r.RegistrationToken, &r.TokenExpiresAt)
	return r, err
}

const createRunner = `
INSERT INTO runners AS r (token_hash, description, tags, run_untagged, paused, registration_type, token_expires_at, access_level)
VALUES ($1, $2, $3, $4, $5, CASE WHEN $6 THEN 'registration_token' ELSE 'authenticated_user' END, $7, $8)
RETURNING ` + runnerCols

// CreateRunner stores a runner with its token hash and expiry.
func (s *Store) CreateRunner(ctx context.Context, r builds.Runner, tokenHash []byte) (builds.Runner, error) {
	if r.Tags == nil {
		r.Tags = []string{}
	}
	if r.AccessLevel == "" {
		r.AccessLevel = builds.AccessNotProtected
	}
	return scanRunner(s.pool.QueryRow(ctx, createRunner, tokenHash, r.Description, r.Tags, r.RunUntagged, r.Paused,
		r.RegistrationToken, r.TokenExpiresAt, r.AccessLevel))
}

// runnerByTokenHash finds a current token or a previous one (in its rotation grace or past
// it: the service compares the expiry with its clock), each through its unique index.
const runnerByTokenHash = `
SELECT r.id, r.description, r.tags, r.run_untagged, r.paused, r.access_level, r.created_at, r.contacted_at,
       r.registration_type = 'registration_token',
       CASE WHEN r.token_hash = $1 THEN r.token_expires_at ELSE r.previous_token_expires_at END
FROM runners r WHERE r.token_hash = $1 OR r.previous_token_hash = $1`

// RunnerByTokenHash finds the runner a token belongs to, with that token's expiry.
func (s *Store) RunnerByTokenHash(ctx context.Context, hash []byte) (builds.Runner, error) {
	r, err := scanRunner(s.pool.QueryRow(ctx, runnerByTokenHash, hash))
	return r, notFound(err, "runner")
}

const runnerByID = `SELECT ` + runnerCols + ` FROM runners r WHERE r.id = $1`

const managersPage = `SELECT ` + managerCols + `, count(*) OVER () FROM runner_managers
WHERE runner_id = $1 ORDER BY id LIMIT $2 OFFSET $3`

const countManagers = `SELECT count(*) FROM runner_managers WHERE runner_id = $1`

// Runner returns a runner with one page of its managers and their total.
func (s *Store) Runner(ctx context.Context, id int64, p builds.Page) (builds.Runner, int, error) {
	r, err := scanRunner(s.pool.QueryRow(ctx, runnerByID, id))
	if err != nil {
		return builds.Runner{}, 0, notFound(err, "runner")
	}
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, managersPage, id, limit, off)
	if err != nil {
		return builds.Runner{}, 0, err
	}
	var total int
	r.Managers, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Manager, error) {
		var m builds.Manager
		err := row.Scan(&m.ID, &m.RunnerID, &m.SystemID, &m.Version, &m.Revision, &m.Platform,
			&m.Architecture, &m.Executor, &m.Shell, &m.Features, &m.ContactedAt, &m.IPAddress, &total)
		return m, err
	})
	if err != nil {
		return builds.Runner{}, 0, err
	}
	if len(r.Managers) == 0 {
		// A page past the end has no row to carry the total.
		err = s.pool.QueryRow(ctx, countManagers, id).Scan(&total)
	}
	return r, total, err
}

const listRunners = `SELECT ` + runnerCols + `, count(*) OVER () FROM runners r ORDER BY r.id LIMIT $1 OFFSET $2`

// Runners lists runners with their managers.
func (s *Store) Runners(ctx context.Context, p builds.Page) ([]builds.Runner, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, listRunners, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Runner, error) {
		var r builds.Runner
		err := row.Scan(&r.ID, &r.Description, &r.Tags, &r.RunUntagged, &r.Paused, &r.AccessLevel, &r.CreatedAt, &r.ContactedAt,
			&r.RegistrationToken, &r.TokenExpiresAt, &total)
		return r, err
	})
	if err != nil {
		return nil, 0, err
	}
	if len(list) == 0 {
		return list, s.countRunners(ctx), nil
	}
	ids := make([]int64, len(list))
	for i, r := range list {
		ids[i] = r.ID
	}
	ms, err := s.managers(ctx, ids)
	for i := range list {
		list[i].Managers = ms[list[i].ID]
	}
	return list, total, err
}

func (s *Store) countRunners(ctx context.Context) int {
	var n int
	_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM runners`).Scan(&n)
	return n
}

const managerCols = `id, runner_id, system_id, version, revision, platform, architecture, executor, shell, features, contacted_at, ip_address`

const managersOf = `SELECT ` + managerCols + ` FROM runner_managers WHERE runner_id = ANY($1) ORDER BY id`

func scanManager(row pgx.Row) (builds.Manager, error) {
	var m builds.Manager
	err := row.Scan(&m.ID, &m.RunnerID, &m.SystemID, &m.Version, &m.Revision, &m.Platform,
		&m.Architecture, &m.Executor, &m.Shell, &m.Features, &m.ContactedAt, &m.IPAddress)
	return m, err
}

func (s *Store) managers(ctx context.Context, runnerIDs []int64) (map[int64][]builds.Manager, error) {
	rows, err := s.pool.Query(ctx, managersOf, runnerIDs)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Manager, error) { return scanManager(row) })
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]builds.Manager, len(runnerIDs))
	for _, m := range list {
		out[m.RunnerID] = append(out[m.RunnerID], m)
	}
	return out, nil
}

const updateRunner = `
UPDATE runners r SET
    description  = COALESCE($2, r.description),
    tags         = COALESCE($3, r.tags),
    run_untagged = COALESCE($4, r.run_untagged),
    paused       = COALESCE($5, r.paused),
    access_level = COALESCE($6, r.access_level)
WHERE r.id = $1
RETURNING ` + runnerCols

// UpdateRunner changes the fields that are set in u.
func (s *Store) UpdateRunner(ctx context.Context, id int64, u builds.RunnerUpdate) (builds.Runner, error) {
	var tags *[]string
	if u.Tags != nil {
		t := *u.Tags
		if t == nil {
			t = []string{}
		}
		tags = &t
	}
	r, err := scanRunner(s.pool.QueryRow(ctx, updateRunner, id, u.Description, tags, u.RunUntagged, u.Paused, u.AccessLevel))
	if err != nil {
		return builds.Runner{}, notFound(err, fmt.Sprintf("runner %d", id))
	}
	ms, err := s.managers(ctx, []int64{id})
	r.Managers = ms[id]
	return r, err
}

// upsertManager inserts a new system_id only while the runner has fewer than $11 others
// ($11 <= 0: no cap); a known one is always updated. No row back means the cap refused it.
const upsertManager = `
WITH m AS (
    INSERT INTO runner_managers (runner_id, system_id, version, revision, platform, architecture,
                                 executor, shell, features, contacted_at, ip_address)
    SELECT $1::bigint, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::jsonb, $10::timestamptz,
           $12::text
    WHERE $11::int <= 0
       OR (SELECT count(*) FROM runner_managers WHERE runner_id = $1 AND system_id <> $2) < $11
    ON CONFLICT (runner_id, system_id) DO UPDATE SET
        -- What the runner did not report stays as it was: gitlab-runner's verify (and
        -- register --token, reset-token) send no info, and would otherwise blank the
        -- version, executor and features that the last job request reported.
        version = COALESCE(NULLIF(EXCLUDED.version, ''), runner_managers.version),
        revision = COALESCE(NULLIF(EXCLUDED.revision, ''), runner_managers.revision),
        platform = COALESCE(NULLIF(EXCLUDED.platform, ''), runner_managers.platform),
        architecture = COALESCE(NULLIF(EXCLUDED.architecture, ''), runner_managers.architecture),
        executor = COALESCE(NULLIF(EXCLUDED.executor, ''), runner_managers.executor),
        shell = COALESCE(NULLIF(EXCLUDED.shell, ''), runner_managers.shell),
        features = CASE WHEN EXCLUDED.features = '{}'::jsonb THEN runner_managers.features ELSE EXCLUDED.features END,
        contacted_at = EXCLUDED.contacted_at,
        ip_address = COALESCE(NULLIF(EXCLUDED.ip_address, ''), runner_managers.ip_address)
    RETURNING ` + managerCols + `
), r AS (
    UPDATE runners SET contacted_at = $10 WHERE id = $1
)
SELECT ` + managerCols + ` FROM m`

// UpsertManager records a machine using a runner's token and what it reported, within the
// runner's cap of maxManagers (ErrTooManyManagers past it).
func (s *Store) UpsertManager(ctx context.Context, runnerID int64, systemID string, info builds.ManagerInfo, now time.Time, maxManagers int) (builds.Manager, error) {
	features := []byte("{}")
	if len(info.Features) > 0 {
		var err error
		if features, err = json.Marshal(info.Features); err != nil {
			return builds.Manager{}, err
		}
	}
	m, err := scanManager(s.pool.QueryRow(ctx, upsertManager, runnerID, systemID, info.Version, info.Revision,
		info.Platform, info.Architecture, info.Executor, info.Shell, string(features), now, maxManagers, info.IPAddress))
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.Manager{}, fmt.Errorf("runner %d: %w", runnerID, builds.ErrTooManyManagers)
	}
	return m, err
}

// lockRunner takes the runner's row first: a claim assigning a build to it (whose foreign
// key check shares that row) then waits, and fails once the runner is gone, instead of
// handing out a build after the runner's builds were ended.
const lockRunner = `SELECT id FROM runners WHERE id = $1 FOR UPDATE`

// heldBuilds are the builds on the runner's machines, through builds_status_idx (few: at
// most the fleet's concurrency), locked in the order every finisher uses: pipeline, build.
const heldBuilds = `
SELECT b.id, b.status, COALESCE(m.system_id, '') FROM builds b
LEFT JOIN runner_managers m ON m.id = b.runner_manager_id
WHERE b.status IN ('waiting_for_runner_ack', 'running', 'canceling') AND b.runner_id = $1
ORDER BY b.pipeline_id, b.id
FOR UPDATE OF b`

const deleteRunner = `DELETE FROM runners WHERE id = $1`

// DeleteRunner removes a runner in one transaction with the builds it holds: each ends as
// d.Finish says, with its auto-retry, and each pipeline advances once, after its last
// build. Its managers go with it (ON DELETE CASCADE) and its builds keep their history with
// the runner unset (ON DELETE SET NULL).
func (s *Store) DeleteRunner(ctx context.Context, d builds.RunnerDeletion) (builds.RunnerDeleted, error) {
	var res builds.RunnerDeleted
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = builds.RunnerDeleted{}
		var id int64
		if err := tx.QueryRow(ctx, lockRunner, d.RunnerID).Scan(&id); err != nil {
			return notFound(err, fmt.Sprintf("runner %d", d.RunnerID))
		}
		rows, err := tx.Query(ctx, heldBuilds, d.RunnerID)
		if err != nil {
			return err
		}
		held, err := pgx.CollectRows(rows, pgx.RowToStructByPos[builds.HeldBuild])
		if err != nil {
			return err
		}
		var pipelines []int64
		for _, b := range held {
			f, err := finishBuildTx(ctx, tx, d.Finish(b))
			if err != nil {
				return fmt.Errorf("end build %d of runner %d: %w", b.ID, d.RunnerID, err)
			}
			res.Finished = append(res.Finished, f)
			res.Queued = res.Queued || f.Queued
			if n := len(pipelines); n == 0 || pipelines[n-1] != f.Build.PipelineID {
				pipelines = append(pipelines, f.Build.PipelineID) // held is in pipeline order
			}
		}
		for _, p := range pipelines {
			queued, err := advance(ctx, tx, p, d.Now)
			if err != nil {
				return fmt.Errorf("advance pipeline %d: %w", p, err)
			}
			res.Queued = res.Queued || queued
		}
		_, err = tx.Exec(ctx, deleteRunner, d.RunnerID)
		return err
	})
	return res, err
}

const deleteManager = `DELETE FROM runner_managers WHERE runner_id = $1 AND system_id = $2`

// DeleteManager removes one manager (system_id) of a runner.
func (s *Store) DeleteManager(ctx context.Context, runnerID int64, systemID string) error {
	tag, err := s.pool.Exec(ctx, deleteManager, runnerID, systemID)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("manager %.40q of runner %d: %w", systemID, runnerID, builds.ErrNotFound)
	}
	return err
}

const setRunnerToken = `
UPDATE runners SET token_hash = $2, token_expires_at = $3, previous_token_hash = NULL, previous_token_expires_at = NULL
WHERE id = $1`

// SetRunnerToken replaces a runner's token and forgets its previous one (an operator's reset
// revokes).
func (s *Store) SetRunnerToken(ctx context.Context, id int64, tokenHash []byte, expiresAt *time.Time) error {
	tag, err := s.pool.Exec(ctx, setRunnerToken, id, tokenHash, expiresAt)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("runner %d: %w", id, builds.ErrNotFound)
	}
	return err
}

// rotateRunnerToken is builds.TokenRotation as one compare-and-set on the presented token
// ($2), valid at $6. Presented as the current token, it becomes the previous one until $5
// or its own expiry (LEAST skips a NULL), or is dropped when $5 is NULL; presented as the
// previous one, the current token (never received) is replaced and the previous kept.
const rotateRunnerToken = `
UPDATE runners SET
    previous_token_hash = CASE WHEN token_hash <> $2 THEN previous_token_hash
                               WHEN $5::timestamptz IS NULL THEN NULL ELSE token_hash END,
    previous_token_expires_at = CASE WHEN token_hash <> $2 THEN previous_token_expires_at
                                     WHEN $5::timestamptz IS NULL THEN NULL ELSE LEAST($5, token_expires_at) END,
    token_hash = $3, token_expires_at = $4
WHERE id = $1
  AND (token_hash = $2 AND (token_expires_at IS NULL OR token_expires_at > $6)
       OR previous_token_hash = $2 AND previous_token_expires_at > $6)`

// RotateRunnerToken applies a runner's reset of its own token; ErrNotFound when the
// presented token is not valid any more.
func (s *Store) RotateRunnerToken(ctx context.Context, r builds.TokenRotation) error {
	tag, err := s.pool.Exec(ctx, rotateRunnerToken, r.RunnerID, r.Presented, r.New, r.ExpiresAt, r.PreviousUntil, r.Now)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("token of runner %d: %w", r.RunnerID, builds.ErrNotFound)
	}
	return err
}

const deleteStaleManagers = `
DELETE FROM runner_managers WHERE id IN (
    SELECT id FROM runner_managers WHERE contacted_at < $1
    ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`

// DeleteStaleManagers removes up to limit managers not seen since before; builds they ran
// keep their history (runner_manager_id ON DELETE SET NULL).
func (s *Store) DeleteStaleManagers(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, deleteStaleManagers, before, limit)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
