package pgflags

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel is the LISTEN/NOTIFY channel every change is announced on; the payload is the
// flag's name.
const Channel = "jobapi_feature_flags"

// Store changes and reads flags for the operator API. Each change is one transaction that
// ends with a NOTIFY, so every replica's Provider reloads as soon as it commits.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Get returns the flag called name: ErrInvalidName, ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (Feature, error) {
	if err := validName(name); err != nil {
		return Feature{}, err
	}
	rows, err := loadFlags(ctx, s.pool, &name)
	if err != nil {
		return Feature{}, fmt.Errorf("get feature %q: %w", name, err)
	}
	if len(rows) == 0 {
		return Feature{}, ErrNotFound
	}
	return rows[0].feature(), nil
}

// List returns every flag ever set, by name.
func (s *Store) List(ctx context.Context) ([]Feature, error) {
	rows, err := loadFlags(ctx, s.pool, nil)
	if err != nil {
		return nil, fmt.Errorf("list features: %w", err)
	}
	features := make([]Feature, len(rows))
	for i, r := range rows {
		features[i] = r.feature()
	}
	return features, nil
}

const (
	enableFlag = `UPDATE feature_flags SET enabled = true WHERE name = $1`
	// Disabling clears every gate, as Flipper's disable does: "off" means off for everyone.
	disableFlag   = `UPDATE feature_flags SET enabled = false, percentage_of_actors = NULL WHERE name = $1`
	deleteActors  = `DELETE FROM feature_flag_actors WHERE name = $1`
	addActor      = `INSERT INTO feature_flag_actors (name, actor) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	removeActor   = `DELETE FROM feature_flag_actors WHERE name = $1 AND actor = $2`
	setPercentage = `UPDATE feature_flags SET percentage_of_actors = NULLIF($2::int, 0) WHERE name = $1`
	// A disabled flag is a kill switch for the evaluator; opening a gate on it afterwards
	// means the operator wants that gate to work, as in Flipper, so the explicit false goes.
	rearmFlag = `UPDATE feature_flags SET enabled = NULL WHERE name = $1 AND enabled = false`
)

// SetBoolean turns the boolean gate on (the flag is on for everyone; other gates are kept for
// when it is turned off) or disables the flag, clearing its other gates. ErrInvalidName.
func (s *Store) SetBoolean(ctx context.Context, name string, on bool) (Feature, error) {
	return s.change(ctx, name, func(tx pgx.Tx) error {
		if on {
			return exec(ctx, tx, enableFlag, name)
		}
		if err := exec(ctx, tx, disableFlag, name); err != nil {
			return err
		}
		return exec(ctx, tx, deleteActors, name)
	})
}

// SetActor opens (on) or closes the gate for one actor, "project:<id>" or "runner:<id>".
// ErrInvalidName, ErrInvalidActor.
func (s *Store) SetActor(ctx context.Context, name, actor string, on bool) (Feature, error) {
	if err := validActor(actor); err != nil {
		return Feature{}, err
	}
	return s.change(ctx, name, func(tx pgx.Tx) error {
		if !on {
			return exec(ctx, tx, removeActor, name, actor)
		}
		if err := exec(ctx, tx, addActor, name, actor); err != nil {
			return err
		}
		return exec(ctx, tx, rearmFlag, name)
	})
}

// SetPercentage sets the percentage_of_actors gate; 0 removes it. ErrInvalidName,
// ErrInvalidPercentage.
func (s *Store) SetPercentage(ctx context.Context, name string, pct int) (Feature, error) {
	if err := validPercentage(pct); err != nil {
		return Feature{}, err
	}
	return s.change(ctx, name, func(tx pgx.Tx) error {
		if err := exec(ctx, tx, setPercentage, name, pct); err != nil {
			return err
		}
		if pct == 0 {
			return nil
		}
		return exec(ctx, tx, rearmFlag, name)
	})
}

const deleteFlag = `DELETE FROM feature_flags WHERE name = $1`

// Delete removes the flag and its gates, so it is off again. ErrInvalidName, ErrNotFound.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, deleteFlag, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return exec(ctx, tx, notify, Channel, name)
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete feature %q: %w", name, err)
	}
	return err
}

const (
	// Every change first upserts the flag row: it creates the flag as GitLab's POST does, and
	// its row lock serialises concurrent changes to the same flag.
	upsertFlag = `
INSERT INTO feature_flags (name) VALUES ($1)
ON CONFLICT (name) DO UPDATE SET updated_at = now()`
	// NOTIFY inside the transaction is delivered only if it commits.
	notify = `SELECT pg_notify($1, $2)`
)

// change runs apply on the (upserted) flag in one transaction, announces it, and returns the
// flag as committed.
func (s *Store) change(ctx context.Context, name string, apply func(pgx.Tx) error) (Feature, error) {
	if err := validName(name); err != nil {
		return Feature{}, err
	}
	var f Feature
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := exec(ctx, tx, upsertFlag, name); err != nil {
			return err
		}
		if err := apply(tx); err != nil {
			return err
		}
		if err := exec(ctx, tx, notify, Channel, name); err != nil {
			return err
		}
		rows, err := loadFlags(ctx, tx, &name)
		if err != nil {
			return err
		}
		f = rows[0].feature()
		return nil
	})
	if err != nil {
		return Feature{}, fmt.Errorf("change feature %q: %w", name, err)
	}
	return f, nil
}

func exec(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	_, err := tx.Exec(ctx, sql, args...)
	return err
}
