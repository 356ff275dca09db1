package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/resourcegroups"
)

// Resource groups (migration 000021). A build of a group holds it from pending until it
// ends: builds_resource_holder_idx, a unique index over the group's builds in pending,
// waiting_for_runner_ack, running or canceling, makes a second holder impossible whatever
// code path tries it. The claim needs no filter of its own: it moves a pending build, which
// the index already made its group's only holder, within the holder states, so two
// replicas can never hand out two jobs of one group, one- or two-phase alike.
//
// Who gets a free group is decided under the group's row lock (FOR NO KEY UPDATE, which
// the foreign-key checks of new builds, KEY SHARE, do not wait for), taken in a statement
// of its own before the one that looks for holders: that statement's snapshot then sees
// what every earlier lock holder committed. Every transaction that frees a group (a build
// of it ended or was canceled) or makes a build wait for one takes the lock of its
// pipeline's groups in advance, so whichever of two such transactions comes second sees
// the other's work: no wake-up is lost and no group is assigned twice. The index stays as
// the invariant's guard: were the lock ever skipped, a race would fail a transaction (a
// unique violation, retried by the caller) instead of double-booking the group. The due
// pass's AssignFreeResourceGroups picks up a group whose assignment failed (a candidate
// skipped because it was locked at that moment).

// queuedStatus and queuedEvent release a build: pending, or waiting_for_resource for a
// build of a resource group (the group is assigned to it, or not, by assignGroups next).
const (
	queuedStatus = `CASE WHEN resource_group_id IS NULL THEN 'pending' ELSE 'waiting_for_resource' END`
	queuedEvent  = `CASE WHEN resource_group_id IS NULL THEN 'queued' ELSE 'waiting_for_resource' END`
)

// lockGroupsOfPipeline locks the groups of a pipeline's builds, in id order so that two
// transactions never wait for each other's groups.
const lockGroupsOfPipeline = `
SELECT id FROM resource_groups
WHERE id IN (SELECT resource_group_id FROM builds WHERE pipeline_id = $1 AND resource_group_id IS NOT NULL)
ORDER BY id
FOR NO KEY UPDATE`

const lockGroups = `SELECT id FROM resource_groups WHERE id = ANY($1::bigint[]) ORDER BY id FOR NO KEY UPDATE`

// assignFreeGroups gives each free group among those selected (locked by the caller) to
// its next job: unordered, the one waiting longest; oldest_first and newest_first, the
// first of the upcoming jobs (created, scheduled or waiting_for_resource; GitLab's
// waiting_for_resource_or_upcoming) by pipeline id, waiting ones first within a pipeline,
// and only if that one is waiting (GitLab leaves the group free until it is);
// newest_ready_first, the waiting job of the newest pipeline. The candidate is locked with
// SKIP LOCKED: a build locked by another transaction (a cancel) is left alone rather than
// waited for while this one holds the group's lock; that transaction assigns the group
// after it, or the due pass does.
const (
	assignFreeGroupsHead = `
WITH g AS (
    SELECT rg.id, rg.process_mode FROM resource_groups rg
    WHERE `
	assignFreeGroupsTail = `
      AND NOT EXISTS (SELECT 1 FROM builds h WHERE h.resource_group_id = rg.id
                      AND h.status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling'))
), next AS (
    SELECT (SELECT u.id FROM builds u
            WHERE u.resource_group_id = g.id
              AND u.status IN ('created', 'scheduled', 'waiting_for_resource')
              AND (u.status = 'waiting_for_resource' OR g.process_mode IN ('oldest_first', 'newest_first'))
            ORDER BY CASE WHEN g.process_mode = 'oldest_first' THEN u.pipeline_id END,
                     CASE WHEN g.process_mode IN ('newest_first', 'newest_ready_first') THEN u.pipeline_id END DESC,
                     u.status <> 'waiting_for_resource', u.queued_at, u.id
            LIMIT 1) AS id
    FROM g
), c AS (
    SELECT w.id FROM builds w WHERE w.id IN (SELECT id FROM next) AND w.status = 'waiting_for_resource'
    FOR UPDATE SKIP LOCKED
), b AS (
    UPDATE builds SET status = 'pending', queued_at = $2, updated_at = $2
    FROM c WHERE builds.id = c.id AND builds.status = 'waiting_for_resource'
    RETURNING builds.id, builds.resource_group_id
), e AS (
    INSERT INTO build_events (build_id, type, at, detail)
    SELECT b.id, 'queued', $2, jsonb_build_object('resource_group', rg.key)
    FROM b JOIN resource_groups rg ON rg.id = b.resource_group_id
)
SELECT count(*)::int FROM b`

	// assignGroupsByID: the groups $1.
	assignGroupsByID = assignFreeGroupsHead + `rg.id = ANY($1::bigint[])` + assignFreeGroupsTail
	// assignGroupsOfPipeline: the groups of pipeline $1's builds, as lockGroupsOfPipeline
	// selects them.
	assignGroupsOfPipeline = assignFreeGroupsHead +
		`rg.id IN (SELECT resource_group_id FROM builds WHERE pipeline_id = $1 AND resource_group_id IS NOT NULL)` +
		assignFreeGroupsTail
)

// assignPipelineGroups assigns the free groups of a pipeline's builds (see the comment at
// the top): the lock and the assignment in one round trip, the assignment's snapshot
// still taken after the lock was granted. It reports whether a build was queued.
func assignPipelineGroups(ctx context.Context, tx querier, pipelineID int64, now time.Time) (bool, error) {
	return lockAndAssign(ctx, tx, lockGroupsOfPipeline, assignGroupsOfPipeline, pipelineID, now)
}

// assignGroups locks groups ids and assigns the free ones; whether a build was queued.
func assignGroups(ctx context.Context, tx querier, ids []int64, now time.Time) (bool, error) {
	if len(ids) == 0 {
		return false, nil
	}
	return lockAndAssign(ctx, tx, lockGroups, assignGroupsByID, ids, now)
}

func lockAndAssign(ctx context.Context, tx querier, lock, assign string, arg any, now time.Time) (bool, error) {
	batch := &pgx.Batch{}
	batch.Queue(lock, arg)
	batch.Queue(assign, arg, now)
	br := tx.SendBatch(ctx, batch)
	_, err := br.Exec()
	var n int
	if err == nil {
		err = br.QueryRow().Scan(&n)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("assign resource groups: %w", err)
	}
	return n > 0, nil
}

// resourceGroupKeys lists the distinct groups a definition's jobs name.
func resourceGroupKeys(jobs []builds.JobDefinition) []string {
	var keys []string
	for _, j := range jobs {
		if j.ResourceGroup != "" && !slices.Contains(keys, j.ResourceGroup) {
			keys = append(keys, j.ResourceGroup)
		}
	}
	return keys
}

// insertResourceGroups creates the groups a new pipeline names that its project lacks
// (GitLab's EnsureResourceGroups). DO NOTHING, not DO UPDATE: a conflict then takes no row
// lock, so creating a pipeline never waits for an assignment in progress.
const (
	insertResourceGroups = `
INSERT INTO resource_groups (project_id, key, created_at, updated_at)
SELECT $1, k, $3, $3 FROM unnest($2::text[]) k
ON CONFLICT (project_id, key) DO NOTHING`
	resourceGroupIDs = `SELECT key, id FROM resource_groups WHERE project_id = $1 AND key = ANY($2::text[])`
)

// ensureResourceGroups creates the groups keys of a project that do not exist yet and
// returns every one's id by key.
func ensureResourceGroups(ctx context.Context, tx pgx.Tx, projectID int64, keys []string, now time.Time) (map[string]int64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, insertResourceGroups, projectID, keys, now); err != nil {
		return nil, fmt.Errorf("create resource groups: %w", err)
	}
	rows, err := tx.Query(ctx, resourceGroupIDs, projectID, keys)
	if err != nil {
		return nil, err
	}
	ids := make(map[string]int64, len(keys))
	for rows.Next() {
		var key string
		var id int64
		if err := rows.Scan(&key, &id); err != nil {
			rows.Close()
			return nil, err
		}
		ids[key] = id
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) != len(keys) {
		return nil, fmt.Errorf("create resource groups: %d of %d found", len(ids), len(keys))
	}
	return ids, nil
}

const resourceGroupCols = `id, project_id, key, process_mode, created_at, updated_at`

func scanResourceGroup(row pgx.Row) (resourcegroups.ResourceGroup, error) {
	var g resourcegroups.ResourceGroup
	err := row.Scan(&g.ID, &g.ProjectID, &g.Key, &g.ProcessMode, &g.CreatedAt, &g.UpdatedAt)
	return g, err
}

const (
	listResourceGroups = `SELECT ` + resourceGroupCols + `, count(*) OVER () FROM resource_groups
WHERE project_id = $1 ORDER BY id LIMIT $2 OFFSET $3`
	countResourceGroups = `SELECT count(*) FROM resource_groups WHERE project_id = $1`
	resourceGroupByKey  = `SELECT ` + resourceGroupCols + ` FROM resource_groups WHERE project_id = $1 AND key = $2`
)

// ResourceGroups lists a project's resource groups by id.
func (s *Store) ResourceGroups(ctx context.Context, projectID int64, p builds.Page) ([]resourcegroups.ResourceGroup, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, listResourceGroups, projectID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	total := 0
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (resourcegroups.ResourceGroup, error) {
		var g resourcegroups.ResourceGroup
		err := row.Scan(&g.ID, &g.ProjectID, &g.Key, &g.ProcessMode, &g.CreatedAt, &g.UpdatedAt, &total)
		return g, err
	})
	if err == nil && len(list) == 0 && off > 0 {
		// Past the last page the window count has no row to ride on.
		err = s.pool.QueryRow(ctx, countResourceGroups, projectID).Scan(&total)
	}
	return list, total, err
}

// ResourceGroup returns one group by key.
func (s *Store) ResourceGroup(ctx context.Context, projectID int64, key string) (resourcegroups.ResourceGroup, error) {
	g, err := scanResourceGroup(s.pool.QueryRow(ctx, resourceGroupByKey, projectID, key))
	return g, notFound(err, "resource group")
}

// setProcessMode takes the group's lock itself (FOR NO KEY UPDATE, as an UPDATE of a
// non-key column does): assignGroups then re-locks it, in the same transaction.
const setProcessMode = `
UPDATE resource_groups SET process_mode = $3, updated_at = $4
WHERE project_id = $1 AND key = $2
RETURNING ` + resourceGroupCols

// SetProcessMode changes a group's mode and, in the same transaction, assigns the group if
// it is free and the new mode lets a waiting job have it (GitLab's update also runs the
// assign worker).
func (s *Store) SetProcessMode(ctx context.Context, projectID int64, key, mode string, now time.Time) (resourcegroups.ResourceGroup, bool, error) {
	var g resourcegroups.ResourceGroup
	var queued bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if g, err = scanResourceGroup(tx.QueryRow(ctx, setProcessMode, projectID, key, mode, now)); err != nil {
			return notFound(err, "resource group")
		}
		queued, err = assignGroups(ctx, tx, []int64{g.ID}, now)
		return err
	})
	return g, queued, err
}

// upcomingJobs is GitLab's upcoming_processables: in unordered and newest_ready_first
// mode the waiting jobs, in the other modes the created and scheduled ones too, in the
// order the mode serves them (assignFreeGroups).
const upcomingJobs = `
SELECT ` + buildCols + `, count(*) OVER () FROM builds b` + buildJoins + `
JOIN resource_groups rg ON rg.id = b.resource_group_id
WHERE rg.project_id = $1 AND rg.key = $2
  AND b.status IN ('created', 'scheduled', 'waiting_for_resource')
  AND (b.status = 'waiting_for_resource' OR rg.process_mode IN ('oldest_first', 'newest_first'))
ORDER BY CASE WHEN rg.process_mode = 'oldest_first' THEN b.pipeline_id END,
         CASE WHEN rg.process_mode IN ('newest_first', 'newest_ready_first') THEN b.pipeline_id END DESC,
         b.status <> 'waiting_for_resource', b.queued_at, b.id
LIMIT $3 OFFSET $4`

// UpcomingJobs lists the jobs a group serves next; ErrNotFound without such a group.
func (s *Store) UpcomingJobs(ctx context.Context, projectID int64, key string, p builds.Page) ([]builds.Build, int, error) {
	if _, err := s.ResourceGroup(ctx, projectID, key); err != nil {
		return nil, 0, err
	}
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, upcomingJobs, projectID, key, limit, off)
	if err != nil {
		return nil, 0, err
	}
	total := 0
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Build, error) {
		var b builds.Build
		var status string
		err := row.Scan(append(buildDests(&b, &status), &total)...)
		b.Status = builds.Status(status)
		return b, err
	})
	return list, total, err
}

// waitingGroups finds groups with a waiting job and no holder: the due pass assigns them.
// Only a group whose assignment was skipped (its candidate locked at that moment) is ever
// left so; the pass costs one probe of builds_resource_upcoming_idx when none is.
const waitingGroups = `
SELECT DISTINCT w.resource_group_id FROM builds w
WHERE w.resource_group_id IS NOT NULL AND w.status = 'waiting_for_resource'
  AND NOT EXISTS (SELECT 1 FROM builds h WHERE h.resource_group_id = w.resource_group_id
                  AND h.status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling'))
LIMIT $1`

// AssignFreeResourceGroups assigns up to batch free groups that have a waiting job, and
// returns how many builds it queued.
func (s *Store) AssignFreeResourceGroups(ctx context.Context, now time.Time, batch int) (int, error) {
	rows, err := s.pool.Query(ctx, waitingGroups, batch)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	queued := 0
	// One group per transaction: a group's lock is held for one short statement.
	for _, id := range ids {
		var q bool
		err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
			q, err = assignGroups(ctx, tx, []int64{id}, now)
			return err
		})
		if err != nil {
			return queued, err
		}
		if q {
			queued++
		}
	}
	return queued, nil
}
