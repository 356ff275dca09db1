package pgstore

import (
	"context"
	"encoding/json"
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

// Runner returns a runner with its managers.
func (s *Store) Runner(ctx context.Context, id int64) (builds.Runner, error) {
	r, err := scanRunner(s.pool.QueryRow(ctx, runnerByID, id))
	if err != nil {
		return builds.Runner{}, notFound(err, "runner")
	}
	ms, err := s.managers(ctx, []int64{id})
	r.Managers = ms[id]
	return r, err
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

const upsertManager = `
WITH m AS (
    INSERT INTO runner_managers (runner_id, system_id, version, revision, platform, architecture,
                                 executor, shell, features, contacted_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (runner_id, system_id) DO UPDATE SET
        version = EXCLUDED.version, revision = EXCLUDED.revision, platform = EXCLUDED.platform,
        architecture = EXCLUDED.architecture, executor = EXCLUDED.executor, shell = EXCLUDED.shell,
        features = EXCLUDED.features, contacted_at = EXCLUDED.contacted_at
    RETURNING ` + managerCols + `
), r AS (
    UPDATE runners SET contacted_at = $10 WHERE id = $1
)
SELECT ` + managerCols + ` FROM m`

// UpsertManager records a machine using a runner's token and what it reported.
func (s *Store) UpsertManager(ctx context.Context, runnerID int64, systemID string, info builds.ManagerInfo, now time.Time) (builds.Manager, error) {
	features := []byte("{}")
	if len(info.Features) > 0 {
		var err error
		if features, err = json.Marshal(info.Features); err != nil {
			return builds.Manager{}, err
		}
	}
	return scanManager(s.pool.QueryRow(ctx, upsertManager, runnerID, systemID, info.Version, info.Revision,
		info.Platform, info.Architecture, info.Executor, info.Shell, string(features), now))
}
