package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

const runnerCols = `r.id, r.description, r.tags, r.run_untagged, r.paused, r.created_at, r.contacted_at`

func scanRunner(row pgx.Row) (builds.Runner, error) {
	var r builds.Runner
	err := row.Scan(&r.ID, &r.Description, &r.Tags, &r.RunUntagged, &r.Paused, &r.CreatedAt, &r.ContactedAt)
	return r, err
}

const createRunner = `
INSERT INTO runners AS r (token_hash, description, tags, run_untagged, paused)
VALUES ($1, $2, $3, $4, $5)
RETURNING ` + runnerCols

// CreateRunner stores a runner with its token hash.
func (s *Store) CreateRunner(ctx context.Context, r builds.Runner, tokenHash []byte) (builds.Runner, error) {
	if r.Tags == nil {
		r.Tags = []string{}
	}
	return scanRunner(s.pool.QueryRow(ctx, createRunner, tokenHash, r.Description, r.Tags, r.RunUntagged, r.Paused))
}

const runnerByTokenHash = `SELECT ` + runnerCols + ` FROM runners r WHERE r.token_hash = $1`

// RunnerByTokenHash finds the runner a token belongs to.
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
			&m.Architecture, &m.Executor, &m.Shell, &m.Features, &m.ContactedAt, &total)
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
		err := row.Scan(&r.ID, &r.Description, &r.Tags, &r.RunUntagged, &r.Paused, &r.CreatedAt, &r.ContactedAt, &total)
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

const managerCols = `id, runner_id, system_id, version, revision, platform, architecture, executor, shell, features, contacted_at`

const managersOf = `SELECT ` + managerCols + ` FROM runner_managers WHERE runner_id = ANY($1) ORDER BY id`

func scanManager(row pgx.Row) (builds.Manager, error) {
	var m builds.Manager
	err := row.Scan(&m.ID, &m.RunnerID, &m.SystemID, &m.Version, &m.Revision, &m.Platform,
		&m.Architecture, &m.Executor, &m.Shell, &m.Features, &m.ContactedAt)
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
    paused       = COALESCE($5, r.paused)
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
	r, err := scanRunner(s.pool.QueryRow(ctx, updateRunner, id, u.Description, tags, u.RunUntagged, u.Paused))
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
                                 executor, shell, features, contacted_at)
    SELECT $1::bigint, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::jsonb, $10::timestamptz
    WHERE $11::int <= 0
       OR (SELECT count(*) FROM runner_managers WHERE runner_id = $1 AND system_id <> $2) < $11
    ON CONFLICT (runner_id, system_id) DO UPDATE SET
        version = EXCLUDED.version, revision = EXCLUDED.revision, platform = EXCLUDED.platform,
        architecture = EXCLUDED.architecture, executor = EXCLUDED.executor, shell = EXCLUDED.shell,
        features = EXCLUDED.features, contacted_at = EXCLUDED.contacted_at
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
		info.Platform, info.Architecture, info.Executor, info.Shell, string(features), now, maxManagers))
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.Manager{}, fmt.Errorf("runner %d: %w", runnerID, builds.ErrTooManyManagers)
	}
	return m, err
}

const deleteRunner = `DELETE FROM runners WHERE id = $1`

// DeleteRunner removes a runner; its managers go with it (ON DELETE CASCADE) and its builds
// keep their history with the runner unset (ON DELETE SET NULL).
func (s *Store) DeleteRunner(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, deleteRunner, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("runner %d: %w", id, builds.ErrNotFound)
	}
	return err
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

const setRunnerToken = `UPDATE runners SET token_hash = $2 WHERE id = $1`

// SetRunnerToken replaces a runner's token hash.
func (s *Store) SetRunnerToken(ctx context.Context, id int64, tokenHash []byte) error {
	tag, err := s.pool.Exec(ctx, setRunnerToken, id, tokenHash)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("runner %d: %w", id, builds.ErrNotFound)
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
