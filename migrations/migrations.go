// Package migrations holds jobapi's schema as numbered golang-migrate files embedded in the
// binary, and the few calls the commands and tests need to apply them.
package migrations

import (
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed *.sql
var files embed.FS

// open returns a migrate instance; the caller must Close it, because the pgx5 driver holds a
// dedicated connection and a pool Close would otherwise hang.
func open(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, driverURL(databaseURL))
	if err != nil {
		return nil, fmt.Errorf("connect for migrations: %w", err)
	}
	return m, nil
}

// driverURL rewrites postgres:// URLs to the scheme the pgx/v5 driver registers.
func driverURL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		return databaseURL
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql", "pgx":
		u.Scheme = "pgx5"
	}
	return u.String()
}

func closeAll(m *migrate.Migrate, err error) error {
	srcErr, dbErr := m.Close()
	return errors.Join(err, srcErr, dbErr)
}

// Up applies every migration not yet applied. Concurrent callers (many replicas starting
// at once) serialise on golang-migrate's advisory lock.
func Up(databaseURL string) error {
	m, err := open(databaseURL)
	if err != nil {
		return err
	}
	err = m.Up()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if errors.Is(err, migrate.ErrLockTimeout) {
		err = fmt.Errorf("migrations: another process holds the migration lock: %w", err)
	}
	return closeAll(m, err)
}

// Down rolls back one migration.
func Down(databaseURL string) error {
	m, err := open(databaseURL)
	if err != nil {
		return err
	}
	err = m.Steps(-1)
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	return closeAll(m, err)
}

// Version reports the applied version and whether a failed migration left it dirty.
func Version(databaseURL string) (version uint, dirty bool, err error) {
	m, err := open(databaseURL)
	if err != nil {
		return 0, false, err
	}
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		err = nil
	}
	return version, dirty, closeAll(m, err)
}

// Force marks version v as applied and clean: the way out of a dirty state after fixing the
// database by hand.
func Force(databaseURL string, v int) error {
	m, err := open(databaseURL)
	if err != nil {
		return err
	}
	return closeAll(m, m.Force(v))
}
