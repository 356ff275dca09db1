package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
)

// translate marks an error of Postgres with the domain error it means, keeping the
// original in the chain (for the log, and for the store's own checks of a code, such as
// retryTx's and runnerGone's): an outage is builds.ErrUnavailable, a NUL in text
// builds.ErrNULCharacter, a deadlock or serialization failure builds.ErrContention, a
// broken constraint a *builds.ConstraintError. Other errors (pgx.ErrNoRows, a canceled
// context, the store's own sentinels) pass unchanged, as does one already translated.
func translate(err error) error {
	if err == nil || err == pgx.ErrNoRows {
		return err
	}
	kind := classify(err)
	if kind == nil {
		return err
	}
	var done *pgError
	if errors.As(err, &done) {
		return err
	}
	return &pgError{kind: kind, err: err}
}

// classify is the domain error that err means, nil for none.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		switch {
		// Shutting down, restarting, refusing connections, or full (53300: every connection
		// slot taken, as when a burst of replicas or tests opens pools at once).
		case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03", code == "53300":
			return builds.ErrUnavailable
		case code == "22021", code == "22P05": // character_not_in_repertoire, untranslatable_character
			return builds.ErrNULCharacter
		case code == "40P01", code == "40001": // deadlock_detected, serialization_failure
			return builds.ErrContention
		case code == "23505":
			return &builds.ConstraintError{Kind: builds.Unique, Name: pgErr.ConstraintName}
		case code == "23503":
			return &builds.ConstraintError{Kind: builds.ForeignKey, Name: pgErr.ConstraintName}
		case code == "23514":
			return &builds.ConstraintError{Kind: builds.Check, Name: pgErr.ConstraintName}
		case code == "23502":
			return &builds.ConstraintError{Kind: builds.NotNull, Name: pgErr.ColumnName}
		case code == "23P01":
			return &builds.ConstraintError{Kind: builds.Exclusion, Name: pgErr.ConstraintName}
		case strings.HasPrefix(code, "23"):
			return &builds.ConstraintError{Kind: builds.OtherConstraint, Name: pgErr.ConstraintName}
		}
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // the caller's deadline or departure, not the store's failure
	}
	// The connection failed under the statement: refused, reset, cut off.
	var netErr net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) {
		return builds.ErrUnavailable
	}
	return nil
}

// pgError is a Postgres error with the domain error it means.
type pgError struct {
	kind error
	err  error
}

func (e *pgError) Error() string { return fmt.Sprintf("postgres: %v: %v", e.kind, e.err) }

func (e *pgError) Unwrap() []error { return []error{e.kind, e.err} }

// db is the pool as the store's statements use it: every error they return, at once or
// from a row, rows or batch, is translated. Transactions (inTx, inPipeTx) translate what
// their body returns once it is done, after retryTx has read the codes it retries on.
type db struct{ pool *pgxpool.Pool }

func (d db) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := d.pool.Exec(ctx, sql, args...)
	return tag, translate(err)
}

func (d db) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r, err := d.pool.Query(ctx, sql, args...)
	if err != nil {
		return r, translate(err)
	}
	return rows{r}, nil
}

func (d db) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return row{d.pool.QueryRow(ctx, sql, args...)}
}

func (d db) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return batchResults{d.pool.SendBatch(ctx, b)}
}

// Begin serves pgx.BeginFunc; the transaction's own errors are inTx's to translate.
func (d db) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	return tx, translate(err)
}

func (d db) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c, err := d.pool.Acquire(ctx)
	return c, translate(err)
}

func (d db) Ping(ctx context.Context) error { return translate(d.pool.Ping(ctx)) }

var _ querier = db{}

type row struct{ pgx.Row }

func (r row) Scan(dest ...any) error { return translate(r.Row.Scan(dest...)) }

type rows struct{ pgx.Rows }

func (r rows) Err() error             { return translate(r.Rows.Err()) }
func (r rows) Scan(dest ...any) error { return translate(r.Rows.Scan(dest...)) }
func (r rows) Values() ([]any, error) { v, err := r.Rows.Values(); return v, translate(err) }

type batchResults struct{ pgx.BatchResults }

func (b batchResults) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, translate(err)
}

func (b batchResults) Query() (pgx.Rows, error) {
	r, err := b.BatchResults.Query()
	if err != nil {
		return r, translate(err)
	}
	return rows{r}, nil
}

func (b batchResults) QueryRow() pgx.Row { return row{b.BatchResults.QueryRow()} }

func (b batchResults) Close() error { return translate(b.BatchResults.Close()) }
