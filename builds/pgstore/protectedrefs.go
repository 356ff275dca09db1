package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
)

var _ projects.ProtectedRefStore = (*Store)(nil)

const protectedRefCols = `id, project_id, ref_type, name, push_access_level, merge_access_level, create_access_level,
    allow_force_push, code_owner_approval_required, created_at`

func scanProtectedRef(row pgx.Row) (projects.ProtectedRef, error) {
	var p projects.ProtectedRef
	err := row.Scan(&p.ID, &p.ProjectID, &p.RefType, &p.Name, &p.PushAccessLevel, &p.MergeAccessLevel,
		&p.CreateAccessLevel, &p.AllowForcePush, &p.CodeOwnerApprovalRequired, &p.CreatedAt)
	return p, err
}

const protectedRefsOf = `SELECT ` + protectedRefCols + ` FROM protected_refs
WHERE project_id = $1 AND ref_type = $2 ORDER BY name`

// ProtectedRefs lists a project's protected refs of a type by name.
func (s *Store) ProtectedRefs(ctx context.Context, projectID int64, refType string) ([]projects.ProtectedRef, error) {
	rows, err := s.pool.Query(ctx, protectedRefsOf, projectID, refType)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projects.ProtectedRef, error) { return scanProtectedRef(row) })
	if err != nil || len(list) > 0 {
		return list, err
	}
	// None: a project without protected refs, or no project.
	if _, err := s.Project(ctx, projectID); err != nil {
		return nil, err
	}
	return list, nil
}

const insertProtectedRef = `
INSERT INTO protected_refs (project_id, ref_type, name, push_access_level, merge_access_level, create_access_level,
    allow_force_push, code_owner_approval_required, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING ` + protectedRefCols

// CreateProtectedRef stores a protected ref.
func (s *Store) CreateProtectedRef(ctx context.Context, p projects.ProtectedRef) (projects.ProtectedRef, error) {
	created, err := scanProtectedRef(s.pool.QueryRow(ctx, insertProtectedRef, p.ProjectID, p.RefType, p.Name,
		p.PushAccessLevel, p.MergeAccessLevel, p.CreateAccessLevel, p.AllowForcePush, p.CodeOwnerApprovalRequired, p.CreatedAt))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation: no such project
		return projects.ProtectedRef{}, fmt.Errorf("project %d: %w", p.ProjectID, builds.ErrNotFound)
	}
	if err != nil {
		return projects.ProtectedRef{}, uniqueViolation(err, fmt.Sprintf("protected %s %q", p.RefType, p.Name))
	}
	return created, nil
}

const deleteProtectedRef = `DELETE FROM protected_refs WHERE project_id = $1 AND ref_type = $2 AND name = $3`

// DeleteProtectedRef removes a protected ref.
func (s *Store) DeleteProtectedRef(ctx context.Context, projectID int64, refType, name string) error {
	tag, err := s.pool.Exec(ctx, deleteProtectedRef, projectID, refType, name)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.Project(ctx, projectID); err != nil {
			return err
		}
		return fmt.Errorf("protected %s %q: %w", refType, name, builds.ErrNotFound)
	}
	return nil
}

// refProtection reads what decides whether a new pipeline's ref is protected: whether the
// project has a row (an implicit one protects main only) and its protected names.
const refProtection = `
SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1),
       ARRAY(SELECT name FROM protected_refs WHERE project_id = $1 AND ref_type = 'branch'),
       ARRAY(SELECT name FROM protected_refs WHERE project_id = $1 AND ref_type = 'tag')`

// refProtected decides, in the creating transaction, whether a pipeline of projectID on ref
// is protected (builds.RefProtected).
func refProtected(ctx context.Context, tx pgx.Tx, projectID int64, ref string) (bool, error) {
	var exists bool
	var names builds.ProtectedRefNames
	if err := tx.QueryRow(ctx, refProtection, projectID).Scan(&exists, &names.Branches, &names.Tags); err != nil {
		return false, fmt.Errorf("read protected refs: %w", err)
	}
	if !exists {
		return builds.RefProtected(ref, nil), nil
	}
	return builds.RefProtected(ref, &names), nil
}
