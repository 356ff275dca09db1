package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// TestTranslate: each class of Postgres error leaves the store as the domain error it
// means, with the original still in the chain; the rest pass unchanged.
func TestTranslate(t *testing.T) {
	tests := []struct {
		err  error
		want error // the sentinel errors.Is finds, or a *ConstraintError to compare with
	}{
		{&pgconn.PgError{Code: "08006"}, builds.ErrUnavailable}, // connection failure
		{&pgconn.PgError{Code: "08001"}, builds.ErrUnavailable}, // cannot connect
		{&pgconn.PgError{Code: "57P01"}, builds.ErrUnavailable}, // admin shutdown
		{&pgconn.PgError{Code: "57P02"}, builds.ErrUnavailable}, // crash shutdown
		{&pgconn.PgError{Code: "57P03"}, builds.ErrUnavailable}, // cannot connect now (starting up)
		{&pgconn.PgError{Code: "53300"}, builds.ErrUnavailable}, // too many connections
		{&pgconn.PgError{Code: "22021"}, builds.ErrNULCharacter},
		{&pgconn.PgError{Code: "22P05"}, builds.ErrNULCharacter},
		{&pgconn.PgError{Code: "40P01"}, builds.ErrContention},
		{&pgconn.PgError{Code: "40001"}, builds.ErrContention},
		{&pgconn.PgError{Code: "23505", ConstraintName: "c"}, &builds.ConstraintError{Kind: builds.Unique, Name: "c"}},
		{&pgconn.PgError{Code: "23503", ConstraintName: "c"}, &builds.ConstraintError{Kind: builds.ForeignKey, Name: "c"}},
		{&pgconn.PgError{Code: "23514", ConstraintName: "c"}, &builds.ConstraintError{Kind: builds.Check, Name: "c"}},
		{&pgconn.PgError{Code: "23502", ColumnName: "name"}, &builds.ConstraintError{Kind: builds.NotNull, Name: "name"}},
		{&pgconn.PgError{Code: "23P01", ConstraintName: "c"}, &builds.ConstraintError{Kind: builds.Exclusion, Name: "c"}},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, builds.ErrUnavailable},
		{&pgconn.PgError{Code: "42601"}, nil}, // a syntax error: a bug, left as it is
		{pgx.ErrNoRows, nil},
		{context.Canceled, nil},
		{context.DeadlineExceeded, nil},
		{fmt.Errorf("build 7: %w", builds.ErrConflict), nil},
	}
	for _, tt := range tests {
		cause := fmt.Errorf("statement: %w", tt.err)
		got := translate(cause)
		var ce *builds.ConstraintError
		switch want := tt.want.(type) {
		case nil:
			if got != cause {
				t.Errorf("%v: translated to %v, want it unchanged", tt.err, got)
			}
			continue
		case *builds.ConstraintError:
			if !errors.As(got, &ce) || *ce != *want {
				t.Errorf("%v: got %v, want %v", tt.err, got, want)
			}
		default:
			if !errors.Is(got, want) {
				t.Errorf("%v: got %v, want %v", tt.err, got, want)
			}
		}
		if !errors.Is(got, tt.err) {
			t.Errorf("%v: the translation %v lost it", tt.err, got)
		}
		if again := translate(fmt.Errorf("again: %w", got)); strings.Count(again.Error(), "postgres:") != 1 {
			t.Errorf("%v translated twice: %v", tt.err, again)
		}
	}
}

// TestStoreTranslatesPostgresErrors: the errors of real statements leave the Store
// translated, from a row, from rows, from a transaction, and when Postgres cannot be reached.
func TestStoreTranslatesPostgresErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.DatabaseURL(t)
	proxy := testenv.StartProxy(t, "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig(proxy.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := New(pool)

	// A row: NUL in text, which Postgres cannot hold.
	_, err = store.CreateProject(ctx, builds.Project{Name: "a\x00b", Path: "nul", RepoURL: "file:///x", DefaultBranch: "main", CreatedAt: time.Now()})
	if !errors.Is(err, builds.ErrNULCharacter) {
		t.Errorf("CreateProject with NUL in its name: %v, want ErrNULCharacter", err)
	}
	// The store's own translation still reads the code through the chain.
	p := builds.Project{Name: "p", Path: "p", RepoURL: "file:///x", DefaultBranch: "main", CreatedAt: time.Now()}
	if _, err := store.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateProject(ctx, p); !errors.Is(err, builds.ErrExists) {
		t.Errorf("CreateProject with a taken path: %v, want ErrExists", err)
	}
	// Rows and an exec: a unique violation no method expects.
	_, err = store.pool.Exec(ctx, `INSERT INTO projects (name, path, repo_url, default_branch, created_at, updated_at)
		SELECT name, path, repo_url, default_branch, created_at, updated_at FROM projects`)
	var ce *builds.ConstraintError
	if !errors.As(err, &ce) || ce.Kind != builds.Unique || ce.Name == "" {
		t.Errorf("duplicate insert: %v, want a unique *ConstraintError with its name", err)
	}
	rows, err := store.pool.Query(ctx, `SELECT 1/(x - 2) FROM generate_series(1, 3) x`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgx.CollectRows(rows, pgx.RowTo[int])
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Errorf("division by zero: %v, want it unchanged", err)
	}
	// A transaction: a check violation, once the body is done.
	err = store.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TABLE checked (n int CHECK (n > 0))`)
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO checked VALUES (0)`)
		}
		return err
	})
	if !errors.As(err, &ce) || ce.Kind != builds.Check {
		t.Errorf("check violation in a transaction: %v, want a check *ConstraintError", err)
	}

	// Postgres out of reach: the statement's connection cut, then no connection at all.
	proxy.Stop()
	for _, what := range []string{"cut", "refused"} {
		if _, err := store.Project(ctx, 1); !errors.Is(err, builds.ErrUnavailable) {
			t.Errorf("Project with Postgres %s: %v, want ErrUnavailable", what, err)
		}
		err := store.inTx(ctx, func(tx pgx.Tx) error { return nil })
		if !errors.Is(err, builds.ErrUnavailable) {
			t.Errorf("a transaction with Postgres %s: %v, want ErrUnavailable", what, err)
		}
	}
}
