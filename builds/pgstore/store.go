// Package pgstore is the Postgres implementation of builds.Store: the state of record.
// Every state transition is one compare-and-set statement (UPDATE … WHERE status = ANY(expected))
// whose event is written by the same statement, inside a transaction when more rows move.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
)

// Store implements builds.Store on a pgx pool.
type Store struct {
	pool db
}

var _ builds.Store = (*Store)(nil)

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: db{pool}} }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// inTx runs fn in a transaction, retried as retryTx says.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return translate(retryTx(func() error { return pgx.BeginFunc(ctx, s.pool, fn) }))
}

// retryTx runs one transaction attempt, and again a few times when Postgres aborted it for
// a deadlock or serialization failure (pipeline cancel and stage release lock rows in
// different orders). It is the one retry loop of both transaction kinds (inTx, inPipeTx).
func retryTx(attempt func() error) error {
	var err error
	for i := 0; i < 4; i++ {
		err = attempt()
		if !retryable(err) {
			return err
		}
		time.Sleep(time.Duration(i+1) * 10 * time.Millisecond)
	}
	return err
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40P01" || pgErr.Code == "40001"
	}
	return false
}

// notFound translates pgx.ErrNoRows to the domain sentinel.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, builds.ErrNotFound)
	}
	return err
}

func offset(p builds.Page) (limit, off int) {
	return p.PerPage, (p.Page - 1) * p.PerPage
}
