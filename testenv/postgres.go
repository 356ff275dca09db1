package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/localserver"
	"github.com/jobapi/jobapi/migrations"
)

// DatabaseURL returns the URL of a new database holding the current schema, for this test
// only; it is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	return shared.databaseURL(t)
}

// Pool returns a pool on a new migrated database for this test, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DatabaseURL(t))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(pool.Close) // registered after the drop, so it runs before it
	return pool
}

func (s *servers) databaseURL(t testing.TB) string {
	t.Helper()
	if err := s.postgres(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.tmplOnce.Do(func() { s.tmpl, s.tmplErr = s.ensureTemplate() })
	if s.tmplErr != nil {
		t.Fatalf("testenv: template database: %v", s.tmplErr)
	}

	name := randomName("jobapi_test_")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.clone(ctx, name); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop test database: %v", err)
		}
	})
	u, err := withDatabase(s.pgURL, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return u
}

// postgres finds the server once per binary and opens the admin pool on it.
func (s *servers) postgres() error {
	s.pgOnce.Do(func() {
		s.pgURL, s.pgErr = s.resolve("Postgres", envDatabaseURL, defaultPostgresURLs, localserver.PostgresReachable,
			func(ctx context.Context) (string, error) {
				pg, err := localserver.StartPostgres(ctx, "", nil)
				if err != nil {
					return "", err
				}
				s.pg = pg
				return pg.URL, nil
			})
		if s.pgErr == nil {
			s.admin, s.pgErr = pgxpool.New(context.Background(), s.pgURL)
		}
	})
	return s.pgErr
}

// ensureTemplate returns the name of the migrated template for the embedded schema, creating
// it if no test binary has yet. Binaries of several packages run at once against one server:
// an advisory lock lets one of them build it while the others wait, then find it.
func (s *servers) ensureTemplate() (string, error) {
	name := "jobapi_tmpl_" + migrations.Fingerprint()[:16]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	const lockKey = 0x6a6f6261_70690001 // "jobapi" + 1, any constant shared by all binaries
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey)

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}

	// Build under a scratch name and rename at the end, so a run killed mid-migration never
	// leaves a half-migrated template under the real name.
	scratch := name + "_new"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(scratch)+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(scratch)); err != nil {
		return "", err
	}
	scratchURL, err := withDatabase(s.pgURL, scratch)
	if err != nil {
		return "", err
	}
	if err := migrations.Up(scratchURL); err != nil {
		return "", fmt.Errorf("migrate %s: %w", scratch, err)
	}
	// The migration's connection may still be closing on the server side.
	if err := retryInUse(ctx, func() error {
		_, err := conn.Exec(ctx, "ALTER DATABASE "+ident(scratch)+" RENAME TO "+ident(name))
		return err
	}); err != nil {
		return "", err
	}
	// No connections allowed: a session left on a template makes every clone fail.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", err
	}
	return name, nil
}

func (s *servers) clone(ctx context.Context, name string) error {
	err := retryInUse(ctx, func() error {
		_, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(s.tmpl))
		return err
	})
	if err != nil {
		return fmt.Errorf("create test database from %s: %w", s.tmpl, err)
	}
	return nil
}

// retryInUse retries f while Postgres answers "database is being accessed by other users".
func retryInUse(ctx context.Context, f func() error) error {
	for {
		err := f()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// withDatabase returns the server URL u pointing at database name instead.
func withDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return "", fmt.Errorf("%s: want a postgres:// URL, got %q", envDatabaseURL, redact(u))
	}
	p.Path = "/" + name
	return p.String(), nil
}
