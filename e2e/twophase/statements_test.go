package twophase_test

import (
	"context"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/handlers"
)

// statementsByRequest records the Postgres statements a replica runs for requests (a
// server.Options.Tracer, as cmd/jobapi-bench counts them), pipelined ones included, by
// X-Request-Id and by route; the background passes' carry no request id.
type statementsByRequest struct {
	mu    sync.Mutex
	byID  map[string][]string
	route []routed // in order, until claim takes them
}

type routed struct{ route, sql string }

func (r *statementsByRequest) add(ctx context.Context, sql string) {
	id := handlers.RequestID(ctx)
	if id == "" {
		return
	}
	route := ""
	if rc := chi.RouteContext(ctx); rc != nil {
		route = rc.RoutePattern()
	}
	sql = strings.Join(strings.Fields(sql), " ")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string][]string{}
	}
	r.byID[id] = append(r.byID[id], sql)
	r.route = append(r.route, routed{route: route, sql: sql})
}

// of returns the statements of the request with X-Request-Id id.
func (r *statementsByRequest) of(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// claim returns the job requests' statements recorded since the last call, leaving out the
// runner's lookup and its manager's upsert (each cached for a while, so present or not by
// timing).
func (r *statementsByRequest) claim() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.route {
		if q.route == jobRequestRoute && !strings.Contains(q.sql, "FROM runners r WHERE") && !strings.Contains(q.sql, "INSERT INTO runner_managers") {
			out = append(out, q.sql)
		}
	}
	r.route = nil
	return out
}

func (r *statementsByRequest) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(ctx, d.SQL)
	return ctx
}

func (r *statementsByRequest) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *statementsByRequest) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *statementsByRequest) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(ctx, d.SQL)
}

func (r *statementsByRequest) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
