package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const selectIDTokenKeys = `SELECT private_key FROM id_token_signing_keys ORDER BY created_at DESC, id DESC`

// The lock conflicts with itself and not with reads: replicas starting together queue up
// behind the first, which inserts; the others then find its key.
const lockIDTokenKeys = `LOCK TABLE id_token_signing_keys IN SHARE ROW EXCLUSIVE MODE`

const insertIDTokenKey = `INSERT INTO id_token_signing_keys (private_key) VALUES ($1)`

// IDTokenSigningKeys returns the PEM text of every stored ID token signing key, newest (the
// one to sign with) first. When there is none it stores one from generate, once however
// many replicas ask at the same moment: generate runs outside the transaction (an RSA key
// takes a while) and its key is thrown away if another replica's was stored first.
func (s *Store) IDTokenSigningKeys(ctx context.Context, generate func() ([]byte, error)) ([]string, error) {
	keys, err := s.idTokenKeys(ctx, s.pool)
	if err != nil || len(keys) > 0 {
		return keys, err
	}
	candidate, err := generate()
	if err != nil {
		return nil, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockIDTokenKeys); err != nil {
			return fmt.Errorf("lock id_token_signing_keys: %w", err)
		}
		if keys, err = s.idTokenKeys(ctx, tx); err != nil || len(keys) > 0 {
			return err
		}
		if _, err := tx.Exec(ctx, insertIDTokenKey, string(candidate)); err != nil {
			return fmt.Errorf("store ID token signing key: %w", err)
		}
		keys = []string{string(candidate)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

func (s *Store) idTokenKeys(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := q.Query(ctx, selectIDTokenKeys)
	if err != nil {
		return nil, fmt.Errorf("read ID token signing keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read ID token signing keys: %w", err)
	}
	return keys, nil
}
