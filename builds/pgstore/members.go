package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
)

var _ access.Store = (*Store)(nil)

// The permission check's one read: the primary key of project_members, on every request.
const memberLevel = `SELECT access_level FROM project_members
WHERE project_id = $1 AND user_id = $2 AND (expires_at IS NULL OR expires_at > $3::timestamptz AT TIME ZONE 'UTC')`

// MemberLevel is the user's level on the project at now (NoAccess for none).
func (s *Store) MemberLevel(ctx context.Context, projectID, userID int64, now time.Time) (access.Level, error) {
	var level int
	err := s.pool.QueryRow(ctx, memberLevel, projectID, userID, now).Scan(&level)
	if errors.Is(err, pgx.ErrNoRows) {
		return access.NoAccess, nil
	}
	if err != nil {
		return access.NoAccess, translate(err)
	}
	return access.Level(level), nil
}

const memberCols = `m.project_id, m.user_id, u.username, u.name, u.state, m.access_level, m.expires_at, m.created_at`

func memberFields(m *access.Member, level *int, exp **time.Time) []any {
	return []any{&m.ProjectID, &m.UserID, &m.Username, &m.Name, &m.State, level, exp, &m.CreatedAt}
}

func scanMember(row pgx.Row, extra ...any) (access.Member, error) {
	var m access.Member
	var level int
	var exp *time.Time
	err := row.Scan(append(memberFields(&m, &level, &exp), extra...)...)
	m.Level = access.Level(level)
	if exp != nil {
		d := time.Date(exp.Year(), exp.Month(), exp.Day(), 0, 0, 0, 0, time.UTC)
		m.ExpiresAt = &d
	}
	return m, err
}

const listMembers = `SELECT ` + memberCols + `, count(*) OVER ()
FROM project_members m JOIN users u ON u.id = m.user_id
WHERE m.project_id = $1 AND ($2 = '' OR strpos(lower(u.username), $2) > 0 OR strpos(lower(u.name), $2) > 0)
ORDER BY m.user_id LIMIT $3 OFFSET $4`

// Members lists a project's members by user id; query narrows to usernames and names that
// hold it (GitLab's query=).
func (s *Store) Members(ctx context.Context, projectID int64, query string, pg builds.Page) ([]access.Member, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, listMembers, projectID, strings.ToLower(query), limit, off)
	if err != nil {
		return nil, 0, translate(err)
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (access.Member, error) { return scanMember(row, &total) })
	if err != nil {
		return nil, 0, translate(err)
	}
	if len(list) == 0 {
		if _, err := s.Project(ctx, projectID); err != nil {
			return nil, 0, err
		}
		if pg.Page > 1 {
			err = s.pool.QueryRow(ctx, `SELECT count(*) FROM project_members m JOIN users u ON u.id = m.user_id
WHERE m.project_id = $1 AND ($2 = '' OR strpos(lower(u.username), $2) > 0 OR strpos(lower(u.name), $2) > 0)`,
				projectID, strings.ToLower(query)).Scan(&total)
		}
	}
	return list, total, translate(err)
}

const memberByID = `SELECT ` + memberCols + ` FROM project_members m JOIN users u ON u.id = m.user_id
WHERE m.project_id = $1 AND m.user_id = $2`

// Member returns one member.
func (s *Store) Member(ctx context.Context, projectID, userID int64) (access.Member, error) {
	m, err := scanMember(s.pool.QueryRow(ctx, memberByID, projectID, userID))
	if err != nil {
		return access.Member{}, notFound(err, fmt.Sprintf("member %d of project %d", userID, projectID))
	}
	return m, nil
}

const insertMember = `
WITH m AS (
    INSERT INTO project_members (project_id, user_id, access_level, expires_at, created_at)
    VALUES ($1, $2, $3, $4, $5)
    RETURNING *
)
SELECT ` + memberCols + ` FROM m JOIN users u ON u.id = m.user_id`

// AddMember stores a membership.
func (s *Store) AddMember(ctx context.Context, m access.Member) (access.Member, error) {
	added, err := scanMember(s.pool.QueryRow(ctx, insertMember, m.ProjectID, m.UserID, int(m.Level), m.ExpiresAt, m.CreatedAt))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation: no project or no user
		if strings.Contains(pgErr.ConstraintName, "user") {
			return access.Member{}, fmt.Errorf("user %d: %w", m.UserID, builds.ErrNotFound)
		}
		return access.Member{}, fmt.Errorf("project %d: %w", m.ProjectID, builds.ErrNotFound)
	}
	if err != nil {
		return access.Member{}, translate(uniqueViolation(err, "member"))
	}
	return added, nil
}

// lockMembers takes the project's row lock, which every change of its members takes first:
// two changes of one project run one after the other, so the owners each counts are real.
const lockMembers = `SELECT count(*) FILTER (WHERE m.access_level = 50)
FROM projects p LEFT JOIN project_members m ON m.project_id = p.id
WHERE p.id = $1 GROUP BY p.id`

func lockedMember(ctx context.Context, tx pgx.Tx, projectID, userID int64) (access.Member, int, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM projects WHERE id = $1 FOR UPDATE`, projectID); err != nil {
		return access.Member{}, 0, err
	}
	var owners int
	if err := tx.QueryRow(ctx, lockMembers, projectID).Scan(&owners); err != nil {
		return access.Member{}, 0, notFound(err, fmt.Sprintf("project %d", projectID))
	}
	m, err := scanMember(tx.QueryRow(ctx, memberByID, projectID, userID))
	if err != nil {
		return access.Member{}, 0, notFound(err, fmt.Sprintf("member %d of project %d", userID, projectID))
	}
	return m, owners, nil
}

// UpdateMember applies a change to a member under the project's lock.
func (s *Store) UpdateMember(ctx context.Context, projectID, userID int64, apply func(m *access.Member, owners int) error) (access.Member, error) {
	var out access.Member
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		m, owners, err := lockedMember(ctx, tx, projectID, userID)
		if err != nil {
			return err
		}
		if err := apply(&m, owners); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE project_members SET access_level = $3, expires_at = $4 WHERE project_id = $1 AND user_id = $2`,
			projectID, userID, int(m.Level), m.ExpiresAt); err != nil {
			return err
		}
		out = m
		return nil
	})
	return out, err
}

// RemoveMember deletes a membership under the project's lock, once check agrees.
func (s *Store) RemoveMember(ctx context.Context, projectID, userID int64, check func(m access.Member, owners int) error) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		m, owners, err := lockedMember(ctx, tx, projectID, userID)
		if err != nil {
			return err
		}
		if err := check(m, owners); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM project_members WHERE project_id = $1 AND user_id = $2`, projectID, userID)
		return err
	})
}

var memberProjects = `SELECT ` + projectColsOf("p") + `, count(*) OVER ()
FROM projects p JOIN project_members m ON m.project_id = p.id
WHERE m.user_id = $1 AND (m.expires_at IS NULL OR m.expires_at > $2::timestamptz AT TIME ZONE 'UTC')
ORDER BY p.id LIMIT $3 OFFSET $4`

// MemberProjects lists the user's projects by id.
func (s *Store) MemberProjects(ctx context.Context, userID int64, now time.Time, pg builds.Page) ([]builds.Project, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, memberProjects, userID, now, limit, off)
	if err != nil {
		return nil, 0, translate(err)
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Project, error) {
		var p builds.Project
		err := row.Scan(append(projectFields(&p), &total)...)
		return p, err
	})
	if err == nil && len(list) == 0 && pg.Page > 1 {
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM project_members
WHERE user_id = $1 AND (expires_at IS NULL OR expires_at > $2::timestamptz AT TIME ZONE 'UTC')`, userID, now).Scan(&total)
	}
	return list, total, translate(err)
}

// projectColsOf is projectCols qualified by a table alias.
func projectColsOf(alias string) string {
	cols := strings.Split(projectCols, ", ")
	for i, c := range cols {
		cols[i] = alias + "." + c
	}
	return strings.Join(cols, ", ")
}
