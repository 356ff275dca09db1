package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
)

var _ projects.Store = (*Store)(nil)
var _ builds.ProjectReader = (*Store)(nil)

const projectCols = `id, name, path, repo_url, default_branch, created_at, updated_at, ci_config_path`

// projectFields are the scan destinations of projectCols, in its order: every read of a
// project scans through them, so that a column is added in two places only.
func projectFields(p *builds.Project) []any {
	return []any{&p.ID, &p.Name, &p.Path, &p.RepoURL, &p.DefaultBranch, &p.CreatedAt, &p.UpdatedAt, &p.CIConfigPath}
}

func scanProject(row pgx.Row) (builds.Project, error) {
	var p builds.Project
	err := row.Scan(projectFields(&p)...)
	return p, err
}

// uniqueViolation turns a duplicate key into ErrExists.
func uniqueViolation(err error, what string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%s: %w", what, builds.ErrExists)
	}
	return err
}

// insertProject protects the new project's default branch, as GitLab does when it creates a
// project.
const insertProject = `
WITH p AS (
    INSERT INTO projects (name, path, repo_url, default_branch, created_at, updated_at, ci_config_path)
    VALUES ($1, $2, $3, $4, $5, $5, $6)
    RETURNING *
), pb AS (
    INSERT INTO protected_refs (project_id, ref_type, name, created_at)
    SELECT id, 'branch', default_branch, created_at FROM p
)
SELECT ` + projectCols + ` FROM p`

// CreateProject stores a new project.
func (s *Store) CreateProject(ctx context.Context, p builds.Project) (builds.Project, error) {
	created, err := scanProject(s.pool.QueryRow(ctx, insertProject, p.Name, p.Path, p.RepoURL, p.DefaultBranch, p.CreatedAt, p.CIConfigPath))
	if err != nil {
		return builds.Project{}, uniqueViolation(err, fmt.Sprintf("path %q", p.Path))
	}
	return created, nil
}

const projectByID = `SELECT ` + projectCols + ` FROM projects WHERE id = $1`

// Project returns one project.
func (s *Store) Project(ctx context.Context, id int64) (builds.Project, error) {
	p, err := scanProject(s.pool.QueryRow(ctx, projectByID, id))
	if err != nil {
		return builds.Project{}, notFound(err, fmt.Sprintf("project %d", id))
	}
	return p, nil
}

const projectByPath = `SELECT ` + projectCols + ` FROM projects WHERE path = $1`

// ProjectByPath returns the project whose path (its URL name in the one namespace) is path.
func (s *Store) ProjectByPath(ctx context.Context, path string) (builds.Project, error) {
	p, err := scanProject(s.pool.QueryRow(ctx, projectByPath, path))
	if err != nil {
		return builds.Project{}, notFound(err, fmt.Sprintf("project %.60q", path))
	}
	return p, nil
}

const listProjects = `SELECT ` + projectCols + `, count(*) OVER () FROM projects ORDER BY id LIMIT $1 OFFSET $2`

// Projects lists projects by id.
func (s *Store) Projects(ctx context.Context, pg builds.Page) ([]builds.Project, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, listProjects, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Project, error) {
		var p builds.Project
		err := row.Scan(append(projectFields(&p), &total)...)
		return p, err
	})
	if err == nil && len(list) == 0 && pg.Page > 1 {
		// Past the last page the window count is not there: count apart.
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM projects`).Scan(&total)
	}
	return list, total, err
}

const lockProject = `SELECT ` + projectCols + ` FROM projects WHERE id = $1 FOR UPDATE`

const updateProject = `
UPDATE projects SET name = $2, path = $3, repo_url = $4, default_branch = $5, updated_at = $6, ci_config_path = $7
WHERE id = $1
RETURNING ` + projectCols

// UpdateProject applies a change under the row lock.
func (s *Store) UpdateProject(ctx context.Context, id int64, apply func(*builds.Project) error, now time.Time) (builds.Project, error) {
	var out builds.Project
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		p, err := scanProject(tx.QueryRow(ctx, lockProject, id))
		if err != nil {
			return notFound(err, fmt.Sprintf("project %d", id))
		}
		if err := apply(&p); err != nil {
			return err
		}
		out, err = scanProject(tx.QueryRow(ctx, updateProject, id, p.Name, p.Path, p.RepoURL, p.DefaultBranch, now, p.CIConfigPath))
		return uniqueViolation(err, fmt.Sprintf("path %q", p.Path))
	})
	return out, err
}

// deleteProject deletes the project only when no pipeline of it is unfinished; the lock on
// the project row is not enough (pipelines do not reference it), so the check and the delete
// are one statement and a pipeline created at the same moment is the operator's race.
const deleteProject = `
WITH busy AS (
    SELECT 1 FROM pipelines WHERE project_id = $1 AND status IN ('created', 'pending', 'running', 'manual', 'scheduled') LIMIT 1
), gone AS (
    DELETE FROM projects WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM busy) RETURNING id
)
SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1), EXISTS (SELECT 1 FROM gone)`

// DeleteProject removes a project and (by cascade) its variables.
func (s *Store) DeleteProject(ctx context.Context, id int64) error {
	var exists, deleted bool
	if err := s.pool.QueryRow(ctx, deleteProject, id).Scan(&exists, &deleted); err != nil {
		return err
	}
	switch {
	case deleted:
		return nil
	case exists:
		return fmt.Errorf("project %d: %w", id, projects.ErrProjectBusy)
	}
	return fmt.Errorf("project %d: %w", id, builds.ErrNotFound)
}

const projectVariables = `
SELECT key, value, masked, protected, variable_type FROM project_variables WHERE project_id = $1 ORDER BY key`

func collectVariables(rows pgx.Rows) ([]builds.ProjectVariable, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.ProjectVariable, error) {
		var v builds.ProjectVariable
		err := row.Scan(&v.Key, &v.Value, &v.Masked, &v.Protected, &v.VariableType)
		return v, err
	})
}

// ProjectVariables lists a project's variables by key.
func (s *Store) ProjectVariables(ctx context.Context, projectID int64) ([]builds.ProjectVariable, error) {
	if _, err := s.Project(ctx, projectID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, projectVariables, projectID)
	if err != nil {
		return nil, err
	}
	return collectVariables(rows)
}

const insertVariable = `
INSERT INTO project_variables (project_id, key, value, masked, protected, variable_type)
VALUES ($1, $2, $3, $4, $5, $6)`

// CreateProjectVariable stores a new variable.
func (s *Store) CreateProjectVariable(ctx context.Context, projectID int64, v builds.ProjectVariable) error {
	_, err := s.pool.Exec(ctx, insertVariable, projectID, v.Key, v.Value, v.Masked, v.Protected, v.VariableType)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // the project row is missing
		return fmt.Errorf("project %d: %w", projectID, builds.ErrNotFound)
	}
	return uniqueViolation(err, fmt.Sprintf("variable %q", v.Key))
}

const lockVariable = `
SELECT key, value, masked, protected, variable_type FROM project_variables
WHERE project_id = $1 AND key = $2 FOR UPDATE`

const updateVariable = `
UPDATE project_variables SET value = $3, masked = $4, protected = $5, variable_type = $6
WHERE project_id = $1 AND key = $2`

// UpdateProjectVariable applies a change under the row lock.
func (s *Store) UpdateProjectVariable(ctx context.Context, projectID int64, key string, apply func(*builds.ProjectVariable) error) (builds.ProjectVariable, error) {
	var v builds.ProjectVariable
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, lockVariable, projectID, key).Scan(&v.Key, &v.Value, &v.Masked, &v.Protected, &v.VariableType)
		if err != nil {
			return notFound(err, fmt.Sprintf("variable %q of project %d", key, projectID))
		}
		if err := apply(&v); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, updateVariable, projectID, key, v.Value, v.Masked, v.Protected, v.VariableType)
		return err
	})
	return v, err
}

const deleteVariable = `DELETE FROM project_variables WHERE project_id = $1 AND key = $2`

// DeleteProjectVariable removes a variable.
func (s *Store) DeleteProjectVariable(ctx context.Context, projectID int64, key string) error {
	tag, err := s.pool.Exec(ctx, deleteVariable, projectID, key)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("variable %q of project %d: %w", key, projectID, builds.ErrNotFound)
	}
	return nil
}

// jobProject is the project, its variables and its protected names as one row (the
// variables as JSON), so that reading them costs one round trip; no row for an implicit
// project.
const jobProject = `
SELECT ` + projectCols + `, ` + projectVariablesOf + `p.id` + `), '[]'::json),
       ARRAY(SELECT name FROM protected_refs WHERE project_id = p.id AND ref_type = 'branch' ORDER BY name),
       ARRAY(SELECT name FROM protected_refs WHERE project_id = p.id AND ref_type = 'tag' ORDER BY name)
FROM projects p WHERE p.id = $1`

// projectVariablesOf, followed by a project id and "), '[]'::json)", is that project's
// variables as one JSON array (jobProject, and the claim's own read of the project).
const projectVariablesOf = `coalesce((SELECT json_agg(json_build_object('key', v.key, 'value', v.value, 'masked', v.masked,
                                                   'protected', v.protected, 'variable_type', v.variable_type)
                                 ORDER BY v.key)
                 FROM project_variables v WHERE v.project_id = `

type variableRow struct {
	Key          string `json:"key"`
	Value        string `json:"value"`
	Masked       bool   `json:"masked"`
	Protected    bool   `json:"protected"`
	VariableType string `json:"variable_type"`
}

// JobProject reads a project with its variables.
func (s *Store) JobProject(ctx context.Context, projectID int64) (builds.JobProject, error) {
	var (
		p     builds.Project
		vars  []variableRow
		names builds.ProtectedRefNames
	)
	err := s.pool.QueryRow(ctx, jobProject, projectID).Scan(append(projectFields(&p), &vars, &names.Branches, &names.Tags)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.JobProject{}, nil
	}
	if err != nil {
		return builds.JobProject{}, err
	}
	jp := jobProjectOf(&p, vars)
	jp.Protected = names
	return jp, nil
}

func jobProjectOf(p *builds.Project, vars []variableRow) builds.JobProject {
	out := builds.JobProject{Project: p, Variables: make([]builds.ProjectVariable, len(vars))}
	for i, v := range vars {
		out.Variables[i] = builds.ProjectVariable(v)
	}
	return out
}
