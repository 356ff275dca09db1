package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/users"
)

var _ users.Store = (*Store)(nil)

const userCols = `id, username, name, email, state, is_admin, created_at, updated_at`

func scanUser(row pgx.Row) (users.User, error) {
	var u users.User
	var state string
	err := row.Scan(&u.ID, &u.Username, &u.Name, &u.Email, &state, &u.IsAdmin, &u.CreatedAt, &u.UpdatedAt)
	u.State = users.State(state)
	return u, err
}

// taken turns a duplicate username or email (the unique indexes) into users.TakenError.
func taken(err error) error {
	var ce *builds.ConstraintError
	if errors.As(translate(err), &ce) && ce.Kind == builds.Unique {
		switch ce.Name {
		case "users_username_key":
			return &users.TakenError{Field: "Username"}
		case "users_email_key":
			return &users.TakenError{Field: "Email"}
		}
	}
	return err
}

const insertUser = `INSERT INTO users (username, name, email, is_admin, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $5) RETURNING ` + userCols

// CreateUser stores a user.
func (s *Store) CreateUser(ctx context.Context, u users.NewUser, now time.Time) (users.User, error) {
	created, err := scanUser(s.pool.QueryRow(ctx, insertUser, u.Username, u.Name, u.Email, u.IsAdmin, now))
	return created, taken(err)
}

// The filter's empty values match everything; Search matches a part of the username, name
// or email (strpos: no LIKE pattern characters to escape).
const usersWhere = `WHERE ($1 = '' OR lower(username) = lower($1))
AND ($2 = '' OR strpos(lower(username), lower($2)) > 0 OR strpos(lower(name), lower($2)) > 0 OR strpos(lower(email), lower($2)) > 0)
AND ($3 = '' OR state = $3)`

// Users lists one page of users, oldest first, and their total.
func (s *Store) Users(ctx context.Context, f users.UserFilter, pg builds.Page) ([]users.User, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, `SELECT `+userCols+`, count(*) OVER () FROM users `+usersWhere+` ORDER BY id LIMIT $4 OFFSET $5`,
		f.Username, f.Search, string(f.State), limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (users.User, error) {
		var u users.User
		var state string
		err := row.Scan(&u.ID, &u.Username, &u.Name, &u.Email, &state, &u.IsAdmin, &u.CreatedAt, &u.UpdatedAt, &total)
		u.State = users.State(state)
		return u, err
	})
	if err != nil || len(list) > 0 || pg.Page <= 1 {
		return list, total, err
	}
	// Past the last page: the total apart.
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM users `+usersWhere, f.Username, f.Search, string(f.State)).Scan(&total)
	return list, total, err
}

// User reads one user.
func (s *Store) User(ctx context.Context, id int64) (users.User, error) {
	u, err := scanUser(s.pool.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = $1`, id))
	return u, notFound(err, fmt.Sprintf("user %d", id))
}

const updateUser = `UPDATE users SET username = coalesce($2, username), name = coalesce($3, name),
email = coalesce($4, email), is_admin = coalesce($5, is_admin), state = coalesce($6, state), updated_at = $7
WHERE id = $1 RETURNING ` + userCols

// UpdateUser changes the fields c sets.
func (s *Store) UpdateUser(ctx context.Context, id int64, c users.UserChange, now time.Time) (users.User, error) {
	var state *string
	if c.State != nil {
		v := string(*c.State)
		state = &v
	}
	u, err := scanUser(s.pool.QueryRow(ctx, updateUser, id, c.Username, c.Name, c.Email, c.IsAdmin, state, now))
	return u, notFound(taken(err), fmt.Sprintf("user %d", id))
}

// DeleteUser removes a user; its tokens go with it (ON DELETE CASCADE).
func (s *Store) DeleteUser(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM users WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("user %d: %w", id, builds.ErrNotFound)
	}
	return err
}

const tokenCols = `id, user_id, name, scopes, expires_at, revoked, created_at, last_used_at`

func scanToken(row pgx.Row) (users.Token, error) {
	var t users.Token
	err := row.Scan(&t.ID, &t.UserID, &t.Name, &t.Scopes, &t.ExpiresAt, &t.Revoked, &t.CreatedAt, &t.LastUsedAt)
	return t, err
}

const insertToken = `INSERT INTO personal_access_tokens (user_id, name, scopes, token_hash, expires_at, created_at)
SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM users WHERE id = $1)
RETURNING ` + tokenCols

// CreateToken stores a token of an existing user with its secret's hash.
func (s *Store) CreateToken(ctx context.Context, t users.Token, hash []byte) (users.Token, error) {
	created, err := scanToken(s.pool.QueryRow(ctx, insertToken, t.UserID, t.Name, t.Scopes, hash, t.ExpiresAt, t.CreatedAt))
	return created, notFound(err, fmt.Sprintf("user %d", t.UserID))
}

// Tokens lists one page of tokens, of one user when userID is not 0, oldest first.
func (s *Store) Tokens(ctx context.Context, userID int64, pg builds.Page) ([]users.Token, int, error) {
	limit, off := offset(pg)
	rows, err := s.pool.Query(ctx, `SELECT `+tokenCols+`, count(*) OVER () FROM personal_access_tokens
WHERE $1 = 0 OR user_id = $1 ORDER BY id LIMIT $2 OFFSET $3`, userID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (users.Token, error) {
		var t users.Token
		err := row.Scan(&t.ID, &t.UserID, &t.Name, &t.Scopes, &t.ExpiresAt, &t.Revoked, &t.CreatedAt, &t.LastUsedAt, &total)
		return t, err
	})
	if err != nil || len(list) > 0 || pg.Page <= 1 {
		return list, total, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM personal_access_tokens WHERE $1 = 0 OR user_id = $1`, userID).Scan(&total)
	return list, total, err
}

// Token reads one token.
func (s *Store) Token(ctx context.Context, id int64) (users.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM personal_access_tokens WHERE id = $1`, id))
	return t, notFound(err, fmt.Sprintf("personal access token %d", id))
}

// RevokeToken marks an unrevoked token revoked.
func (s *Store) RevokeToken(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE personal_access_tokens SET revoked = true WHERE id = $1 AND NOT revoked`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("unrevoked personal access token %d: %w", id, builds.ErrNotFound)
	}
	return err
}

// RotateToken revokes the token and stores its successor in one transaction; the revoke's
// compare-and-set (NOT revoked) lets one of two concurrent rotations through.
func (s *Store) RotateToken(ctx context.Context, id int64, next users.Token, hash []byte) (users.Token, error) {
	var created users.Token
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE personal_access_tokens SET revoked = true WHERE id = $1 AND NOT revoked`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("unrevoked personal access token %d: %w", id, builds.ErrNotFound)
		}
		created, err = scanToken(tx.QueryRow(ctx, insertToken, next.UserID, next.Name, next.Scopes, hash, next.ExpiresAt, next.CreatedAt))
		return notFound(err, fmt.Sprintf("user %d", next.UserID))
	})
	return created, err
}

const tokenByHash = `SELECT t.id, t.user_id, t.name, t.scopes, t.expires_at, t.revoked, t.created_at, t.last_used_at,
u.id, u.username, u.name, u.email, u.state, u.is_admin, u.created_at, u.updated_at
FROM personal_access_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = $1`

// TokenByHash finds a token by its secret's hash (the unique index), with its user.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (users.Token, users.User, error) {
	var t users.Token
	var u users.User
	var state string
	err := s.pool.QueryRow(ctx, tokenByHash, hash).Scan(&t.ID, &t.UserID, &t.Name, &t.Scopes, &t.ExpiresAt, &t.Revoked,
		&t.CreatedAt, &t.LastUsedAt, &u.ID, &u.Username, &u.Name, &u.Email, &state, &u.IsAdmin, &u.CreatedAt, &u.UpdatedAt)
	u.State = users.State(state)
	return t, u, notFound(err, "personal access token")
}

// TouchToken records a token's use.
func (s *Store) TouchToken(ctx context.Context, id int64, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE personal_access_tokens SET last_used_at = $2 WHERE id = $1`, id, at)
	return err
}
