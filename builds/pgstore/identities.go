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

var _ users.IdentityStore = (*Store)(nil)

const userByIdentity = `SELECT ` + userCols + ` FROM users
WHERE id = (SELECT user_id FROM user_identities WHERE issuer = $1 AND subject = $2)`

// UserByIdentity finds the user linked to a provider's account.
func (s *Store) UserByIdentity(ctx context.Context, issuer, subject string) (users.User, error) {
	u, err := scanUser(s.pool.QueryRow(ctx, userByIdentity, issuer, subject))
	return u, notFound(err, "identity")
}

const insertIdentity = `INSERT INTO user_identities (issuer, subject, user_id, created_at) VALUES ($1, $2, $3, $4)`

// CreateUserWithIdentity creates a user and links the provider's account to it in one
// transaction: a sign-in that fails halfway leaves neither. A second sign-in of the same
// account racing this one finds the identity taken (builds.ErrExists) and creates nothing.
func (s *Store) CreateUserWithIdentity(ctx context.Context, u users.NewUser, issuer, subject string, now time.Time) (users.User, error) {
	var created users.User
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if created, err = scanUser(tx.QueryRow(ctx, insertUser, u.Username, u.Name, u.Email, u.IsAdmin, now)); err != nil {
			return taken(err)
		}
		if _, err := tx.Exec(ctx, insertIdentity, issuer, subject, created.ID, now); err != nil {
			var ce *builds.ConstraintError
			if errors.As(translate(err), &ce) && ce.Kind == builds.Unique {
				return fmt.Errorf("identity of %s: %w", issuer, builds.ErrExists)
			}
			return err
		}
		return nil
	})
	return created, err
}
