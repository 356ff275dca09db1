package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/listings"
)

var _ listings.Store = (*Store)(nil)

// projectKnown: a project row, or the pipelines of an implicit project (pipelines_project_idx).
const projectKnown = `
SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1) OR EXISTS (SELECT 1 FROM pipelines WHERE project_id = $1)`

// ProjectKnown reports whether a project exists.
func (s *Store) ProjectKnown(ctx context.Context, projectID int64) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, projectKnown, projectID).Scan(&ok)
	return ok, err
}

// ProjectPaths returns the paths of the projects that have rows.
func (s *Store) ProjectPaths(ctx context.Context, ids []int64) (map[int64]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, path FROM projects WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	out := map[int64]string{}
	var id int64
	var path string
	_, err = pgx.ForEachRow(rows, []any{&id, &path}, func() error {
		out[id] = path
		return nil
	})
	return out, err
}

// projectJobs walks builds_project_idx backwards. Trigger jobs are not listed: GitLab lists
// them apart (…/pipelines/:id/bridges), and a project's jobs are its Ci::Builds.
const (
	projectJobsWhere = ` WHERE b.project_id = $1 AND NOT b.bridge AND (cardinality($2::text[]) = 0 OR b.status = ANY($2))`
	projectJobs      = `SELECT ` + buildCols + ` FROM builds b` + buildJoins + projectJobsWhere + `
ORDER BY b.id DESC LIMIT $3 OFFSET $4`
	countProjectJobs = `SELECT count(*) FROM builds b` + projectJobsWhere
)

// ProjectJobs lists a project's builds, every attempt, newest first.
func (s *Store) ProjectJobs(ctx context.Context, f listings.JobFilter, p builds.Page) ([]builds.Build, int, error) {
	statuses := make([]string, len(f.Statuses))
	for i, st := range f.Statuses {
		statuses[i] = string(st)
	}
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, projectJobs, f.ProjectID, statuses, limit, off)
	if err != nil {
		return nil, 0, err
	}
	list, err := collectBuilds(rows)
	if err != nil {
		return nil, 0, err
	}
	var total int
	err = s.pool.QueryRow(ctx, countProjectJobs, f.ProjectID, statuses).Scan(&total)
	return list, total, err
}

// commitStatuses finds the project's pipelines at the commit by pipelines_project_sha_idx.
// A ref matches by its name, whichever way the pipeline spelled it ("main",
// "refs/heads/main", "refs/tags/v1").
const (
	commitStatusesWhere = ` WHERE p.project_id = $1 AND p.sha = $2
  AND ($3 = '' OR p.ref IN ($3, 'refs/heads/' || $3, 'refs/tags/' || $3))
  AND ($4 = '' OR b.stage = $4) AND ($5 = '' OR b.name = $5) AND ($6 OR b.retried_by IS NULL)`
	commitStatuses = `SELECT ` + buildCols + ` FROM builds b` + buildJoins + commitStatusesWhere + `
ORDER BY b.id LIMIT $7 OFFSET $8`
	countCommitStatuses = `SELECT count(*) FROM builds b JOIN pipelines p ON p.id = b.pipeline_id` + commitStatusesWhere
)

// CommitStatuses lists the builds of a project's pipelines at a commit, oldest first.
func (s *Store) CommitStatuses(ctx context.Context, f listings.CommitStatusFilter, p builds.Page) ([]builds.Build, int, error) {
	limit, off := offset(p)
	args := []any{f.ProjectID, f.SHA, f.Ref, f.Stage, f.Name, f.All}
	rows, err := s.pool.Query(ctx, commitStatuses, append(args, limit, off)...)
	if err != nil {
		return nil, 0, err
	}
	list, err := collectBuilds(rows)
	if err != nil {
		return nil, 0, err
	}
	var total int
	err = s.pool.QueryRow(ctx, countCommitStatuses, args...).Scan(&total)
	return list, total, err
}

// latestSuccessfulJob: the newest successful pipeline of the ref (pipelines_success_ref_idx)
// and its child pipelines, as GitLab looks in a pipeline and its descendants; there the
// newest latest attempt of the name that has an archive.
const latestSuccessfulJob = `
WITH RECURSIVE latest AS (
    SELECT id FROM pipelines
    WHERE project_id = $1 AND ref IN ($2, 'refs/heads/' || $2, 'refs/tags/' || $2) AND status = 'success'
    ORDER BY id DESC LIMIT 1
), tree AS (
    SELECT id FROM latest
    UNION ALL
    SELECT c.id FROM pipelines c JOIN builds pb ON pb.id = c.parent_build_id JOIN tree t ON t.id = pb.pipeline_id
)
SELECT b.id FROM builds b JOIN tree ON tree.id = b.pipeline_id
WHERE b.name = $3 AND b.retried_by IS NULL
  AND EXISTS (SELECT 1 FROM job_artifacts a WHERE a.build_id = b.id AND a.file_type = 'archive')
ORDER BY b.id DESC LIMIT 1`

// LatestSuccessfulJob finds the job whose artifacts GitLab's artifacts-by-ref serve.
func (s *Store) LatestSuccessfulJob(ctx context.Context, projectID int64, ref, name string) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, latestSuccessfulJob, projectID, ref, name).Scan(&id)
	return id, notFound(err, "a successful pipeline for ref "+ref+" with a job "+name+" that has artifacts")
}

const pipelinesByID = `SELECT ` + pipelineListCols + `, created_by FROM pipelines WHERE id = ANY($1)`

// PipelinesByID returns pipelines by id, without their builds.
func (s *Store) PipelinesByID(ctx context.Context, ids []int64) (map[int64]builds.Pipeline, error) {
	rows, err := s.pool.Query(ctx, pipelinesByID, ids)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Pipeline, error) {
		var p builds.Pipeline
		err := row.Scan(&p.ID, &p.ProjectID, &p.Ref, &p.SHA, &p.Stages, &p.TimeoutStrategy, &p.Status,
			&p.CreatedAt, &p.UpdatedAt, &p.FinishedAt, &p.IID, &p.Source, &p.BeforeSHA, &p.Variables, &p.CreatedBy)
		return p, err
	})
	out := make(map[int64]builds.Pipeline, len(list))
	for _, p := range list {
		out[p.ID] = p
	}
	return out, err
}

// listedRunners selects runners with GitLab's status, computed from $1 (online since) and $2
// (stale before) by the rule of listings.RunnerStatus, and the address of the manager seen
// last. Filters: $3 status (empty: any), $4 paused (NULL any), $5 tags the runner must all have.
const (
	listedRunners = `
SELECT * FROM (
    SELECT ` + runnerCols + `,
        CASE WHEN r.contacted_at IS NULL THEN CASE WHEN r.created_at > $2 THEN 'never_contacted' ELSE 'stale' END
             WHEN r.contacted_at <= $2 THEN 'stale'
             WHEN r.contacted_at > $1 THEN 'online'
             ELSE 'offline' END AS status,
        COALESCE((SELECT m.ip_address FROM runner_managers m WHERE m.runner_id = r.id
                  ORDER BY m.contacted_at DESC LIMIT 1), '') AS ip_address
    FROM runners r
) x`
	runnerFilters  = ` WHERE ($3 = '' OR x.status = $3) AND ($4::boolean IS NULL OR x.paused = $4) AND x.tags @> $5::text[]`
	runnerListing  = listedRunners + runnerFilters + ` ORDER BY x.id LIMIT $6 OFFSET $7`
	countRunners   = `SELECT count(*) FROM (` + listedRunners + runnerFilters + `) n`
	runnersByIDSQL = listedRunners + ` WHERE x.id = ANY($3)`
)

func scanListedRunner(row pgx.CollectableRow) (listings.ListedRunner, error) {
	var r listings.ListedRunner
	err := row.Scan(&r.ID, &r.Description, &r.Tags, &r.RunUntagged, &r.Paused, &r.AccessLevel, &r.CreatedAt, &r.ContactedAt,
		&r.RegistrationToken, &r.TokenExpiresAt, &r.Status, &r.IPAddress)
	return r, err
}

// runnerCutoffs are the times listings.RunnerStatus compares the last contact with.
func runnerCutoffs(now time.Time) (onlineSince, staleBefore time.Time) {
	return now.Add(-listings.RunnerOnlineWithin), now.Add(-listings.RunnerStaleAfter)
}

// RunnerListing lists runners, oldest first, with their status at f.Now.
func (s *Store) RunnerListing(ctx context.Context, f listings.RunnerFilter, p builds.Page) ([]listings.ListedRunner, int, error) {
	online, stale := runnerCutoffs(f.Now)
	tags := f.Tags
	if tags == nil {
		tags = []string{}
	}
	args := []any{online, stale, f.Status, f.Paused, tags}
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, runnerListing, append(args, limit, off)...)
	if err != nil {
		return nil, 0, err
	}
	list, err := pgx.CollectRows(rows, scanListedRunner)
	if err != nil {
		return nil, 0, err
	}
	var total int
	err = s.pool.QueryRow(ctx, countRunners, args...).Scan(&total)
	return list, total, err
}

// RunnersByID returns runners by id with their status at now.
func (s *Store) RunnersByID(ctx context.Context, ids []int64, now time.Time) (map[int64]listings.ListedRunner, error) {
	online, stale := runnerCutoffs(now)
	rows, err := s.pool.Query(ctx, runnersByIDSQL, online, stale, ids)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, scanListedRunner)
	out := make(map[int64]listings.ListedRunner, len(list))
	for _, r := range list {
		out[r.ID] = r
	}
	return out, err
}

// RunnerManagers returns the managers of runners by runner id, oldest first.
func (s *Store) RunnerManagers(ctx context.Context, ids []int64) (map[int64][]builds.Manager, error) {
	return s.managers(ctx, ids)
}
