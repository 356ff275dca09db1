package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/auditlog"
)

var (
	_ builds.AuditLog = (*Store)(nil)
	_ auditlog.Store  = (*Store)(nil)
)

const addAudit = `INSERT INTO operator_events (at, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5)`

// AddAudit records an operator action.
func (s *Store) AddAudit(ctx context.Context, e builds.AuditEvent) error {
	if e.Detail == nil {
		e.Detail = map[string]any{}
	}
	_, err := s.pool.Exec(ctx, addAudit, e.At, e.Actor, e.Action, e.Target, e.Detail)
	return err
}

const listAudit = `
SELECT id, at, actor, action, target, detail, count(*) OVER ()
FROM operator_events ORDER BY id DESC LIMIT $1 OFFSET $2`

// Audit lists operator actions, newest first.
func (s *Store) Audit(ctx context.Context, p builds.Page) ([]builds.AuditEvent, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, listAudit, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.AuditEvent, error) {
		var e builds.AuditEvent
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Detail, &total)
		return e, err
	})
	if err == nil && len(list) == 0 && p.Page > 1 {
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM operator_events`).Scan(&total)
	}
	return list, total, err
}

const listAuditOf = `
SELECT id, at, actor, action, target, detail, count(*) OVER ()
FROM operator_events WHERE target = $1 ORDER BY id LIMIT $2 OFFSET $3`

// AuditOf lists the actions on one target, oldest first (operator_events_target_idx).
func (s *Store) AuditOf(ctx context.Context, target string, p builds.Page) ([]builds.AuditEvent, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, listAuditOf, target, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.AuditEvent, error) {
		var e builds.AuditEvent
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Detail, &total)
		return e, err
	})
	if err == nil && len(list) == 0 && p.Page > 1 {
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM operator_events WHERE target = $1`, target).Scan(&total)
	}
	return list, total, err
}
