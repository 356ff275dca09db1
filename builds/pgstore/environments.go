package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
)

var _ projects.EnvironmentStore = (*Store)(nil)

// recordEnvironments creates the environments a new pipeline's jobs name (the first time
// a project names one; a deploy job's url and tier win over a stop job's) and a deployment
// for each job that deploys (action start), as GitLab does when it creates the jobs.
// Environments are taken in name order, so two pipelines naming the same ones cannot
// deadlock.
const recordEnvironments = `
WITH envs AS (
    INSERT INTO environments (project_id, name, slug, external_url, tier, created_at, updated_at)
    SELECT DISTINCT ON (b.payload #>> '{environment,name}') b.project_id, b.payload #>> '{environment,name}',
           b.payload #>> '{environment,slug}', NULLIF(b.payload #>> '{environment,url}', ''),
           b.payload #>> '{environment,tier}', $2, $2
    FROM builds b WHERE b.pipeline_id = $1 AND b.payload ? 'environment'
    ORDER BY b.payload #>> '{environment,name}', (b.payload #>> '{environment,action}' = 'start') DESC, b.id
    ON CONFLICT (project_id, name) DO UPDATE SET updated_at = environments.updated_at -- a no-op, for RETURNING
    RETURNING id, name
)
INSERT INTO deployments (project_id, environment_id, build_id, ref, sha, created_at)
SELECT b.project_id, e.id, b.id, p.ref, p.sha, $2
FROM builds b JOIN pipelines p ON p.id = b.pipeline_id JOIN envs e ON e.name = b.payload #>> '{environment,name}'
WHERE b.pipeline_id = $1 AND b.payload #>> '{environment,action}' = 'start'`

func hasEnvironment(jobs []builds.JobDefinition) bool {
	for _, j := range jobs {
		if j.Environment != nil {
			return true
		}
	}
	return false
}

// Environment state follows the jobs that succeed (GitLab's Environment#start and #stop):
// a deploy makes it available with the deploy's url, a stop job stops it.
const (
	environmentStarted = `UPDATE environments SET state = 'available', external_url = COALESCE(NULLIF($3, ''), external_url),
    updated_at = $4 WHERE project_id = $1 AND name = $2`
	environmentStopped = `UPDATE environments SET state = 'stopped', updated_at = $3 WHERE project_id = $1 AND name = $2`
)

// finishEnvironment is afterFinish's part for a build of an environment: only a success
// changes the environment; other builds cost nothing.
func finishEnvironment(ctx context.Context, tx querier, b builds.Build, to builds.Status, now time.Time) error {
	env := b.Payload.Environment
	if env == nil || to != builds.StatusSuccess {
		return nil
	}
	var err error
	switch env.Action {
	case "start":
		_, err = tx.Exec(ctx, environmentStarted, b.ProjectID, env.Name, env.URL, now)
	case "stop":
		_, err = tx.Exec(ctx, environmentStopped, b.ProjectID, env.Name, now)
	}
	return err
}

const environmentCols = `e.id, e.project_id, e.name, e.slug, COALESCE(e.external_url, ''), e.state, e.tier, e.created_at, e.updated_at`

func scanEnvironment(row pgx.Row) (projects.ProjectEnvironment, error) {
	var e projects.ProjectEnvironment
	err := row.Scan(&e.ID, &e.ProjectID, &e.Name, &e.Slug, &e.ExternalURL, &e.State, &e.Tier, &e.CreatedAt, &e.UpdatedAt)
	return e, err
}

const (
	listEnvironments  = `SELECT ` + environmentCols + ` FROM environments e WHERE e.project_id = $1 ORDER BY e.id LIMIT $2 OFFSET $3`
	countEnvironments = `SELECT count(*) FROM environments WHERE project_id = $1`
	environmentByID   = `SELECT ` + environmentCols + ` FROM environments e WHERE e.project_id = $1 AND e.id = $2`
)

// Environments lists a project's environments by id.
func (s *Store) Environments(ctx context.Context, projectID int64, p builds.Page) ([]projects.ProjectEnvironment, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, listEnvironments, projectID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projects.ProjectEnvironment, error) { return scanEnvironment(row) })
	if err != nil {
		return nil, 0, err
	}
	var total int
	err = s.pool.QueryRow(ctx, countEnvironments, projectID).Scan(&total)
	return list, total, err
}

// Environment returns one environment with its last successful deployment.
func (s *Store) Environment(ctx context.Context, projectID, id int64) (projects.ProjectEnvironment, error) {
	e, err := scanEnvironment(s.pool.QueryRow(ctx, environmentByID, projectID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, builds.ErrNotFound
	}
	if err != nil {
		return e, err
	}
	d, err := scanDeployment(s.pool.QueryRow(ctx, lastDeployment, id))
	switch {
	case err == nil:
		e.LastDeployment = &d
	case !errors.Is(err, pgx.ErrNoRows):
		return e, err
	}
	return e, nil
}

// A deployment's status and finished_at are its build's (see migration 000020): created
// while the job waits (created, manual, scheduled, pending, waiting for an ack), then the
// job's own.
const deploymentCols = `d.id, d.project_id, d.environment_id, e.name, d.ref, d.sha,
    CASE WHEN b.status IN ('running', 'canceling', 'success', 'failed', 'canceled', 'skipped')
         THEN replace(b.status, 'canceling', 'running') ELSE 'created' END,
    d.created_at, greatest(d.created_at, b.updated_at),
    CASE WHEN b.status IN ('success', 'failed', 'canceled', 'skipped') THEN b.finished_at END, ` + buildCols

const deploymentFrom = ` FROM deployments d JOIN environments e ON e.id = d.environment_id JOIN builds b ON b.id = d.build_id` + buildJoins

const (
	listDeployments  = `SELECT ` + deploymentCols + deploymentFrom + `WHERE d.project_id = $1 ORDER BY d.id LIMIT $2 OFFSET $3`
	countDeployments = `SELECT count(*) FROM deployments WHERE project_id = $1`
	lastDeployment   = `SELECT ` + deploymentCols + deploymentFrom + `WHERE d.environment_id = $1 AND b.status = 'success' ORDER BY d.id DESC LIMIT 1`
)

func scanDeployment(row pgx.Row) (projects.Deployment, error) {
	var d projects.Deployment
	var status string
	dests := append([]any{&d.ID, &d.ProjectID, &d.EnvironmentID, &d.EnvironmentName, &d.Ref, &d.SHA, &d.Status,
		&d.CreatedAt, &d.UpdatedAt, &d.FinishedAt}, buildDests(&d.Build, &status)...)
	err := row.Scan(dests...)
	d.Build.Status = builds.Status(status)
	return d, err
}

// Deployments lists a project's deployments by id.
func (s *Store) Deployments(ctx context.Context, projectID int64, p builds.Page) ([]projects.Deployment, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, listDeployments, projectID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projects.Deployment, error) { return scanDeployment(row) })
	if err != nil {
		return nil, 0, err
	}
	var total int
	err = s.pool.QueryRow(ctx, countDeployments, projectID).Scan(&total)
	return list, total, err
}
