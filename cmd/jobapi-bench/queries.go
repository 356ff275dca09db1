package main

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/handlers"
)

// queryCounter is a pgx.QueryTracer for the in-process server's pool. It counts the
// statements of each runner call the bench tagged (see taggingTransport), tells other request
// statements (by route) from background ones (sweeper, reapers, flag refreshes), and sums
// the database time of statements whose context carries a dbClock.
type queryCounter struct {
	mu       sync.Mutex
	inflight map[string]int64        // tagged request id → statements so far
	calls    map[callKey]callQueries // settled tagged calls
	byRoute  map[string]int64        // every request statement, by route pattern
	other    atomic.Int64
	// bySQL counts statements by their text (--debug-queries), request ones and background.
	bySQL map[string]int64
}

// callKey is a runner call (the endpoint name the scenario gave it) and its HTTP status.
type callKey struct {
	endpoint string
	status   int
}

type callQueries struct{ calls, queries int64 }

func newQueryCounter() *queryCounter {
	return &queryCounter{inflight: map[string]int64{}, calls: map[callKey]callQueries{}, byRoute: map[string]int64{}}
}

type dbClockKey struct{}
type queryStartKey struct{}

// dbClock accumulates the time of the queries run with its context.
type dbClock struct {
	queries atomic.Int64
	nanos   atomic.Int64
}

func withDBClock(ctx context.Context, c *dbClock) context.Context {
	return context.WithValue(ctx, dbClockKey{}, c)
}

// tagPrefix starts the X-Request-Id of tagged calls: "bench.<endpoint>.<random hex>", which
// jobapi keeps (it accepts up to 64 of [A-Za-z0-9._-]) and puts in the request context.
const tagPrefix = "bench."

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	id := handlers.RequestID(ctx)
	if q.bySQL != nil {
		key := strings.Join(strings.Fields(data.SQL), " ")
		if id == "" {
			key = "background: " + key
		}
		q.mu.Lock()
		q.bySQL[key]++
		q.mu.Unlock()
	}
	if id != "" {
		route := "request"
		if rc := chi.RouteContext(ctx); rc != nil {
			if p := rc.RoutePattern(); p != "" {
				route = p
			}
		}
		q.mu.Lock()
		q.byRoute[route]++
		if strings.HasPrefix(id, tagPrefix) {
			q.inflight[id]++
		}
		q.mu.Unlock()
	} else {
		q.other.Add(1)
	}
	if _, ok := ctx.Value(dbClockKey{}).(*dbClock); ok {
		return context.WithValue(ctx, queryStartKey{}, time.Now())
	}
	return ctx
}

// A pipelined batch (pgx.Batch) is traced per statement too: each counts as one.
func (q *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (q *queryCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	q.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: data.SQL, Args: data.Args})
}

func (q *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (q *queryCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	c, ok := ctx.Value(dbClockKey{}).(*dbClock)
	if !ok {
		return
	}
	if start, ok := ctx.Value(queryStartKey{}).(time.Time); ok {
		c.queries.Add(1)
		c.nanos.Add(int64(time.Since(start)))
	}
}

// settle moves a finished call's statements to its endpoint and status. jobapi's handlers
// run their statements before they write the answer, so all are counted by then.
func (q *queryCounter) settle(id string, k callKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.calls[k]
	c.calls++
	c.queries += q.inflight[id]
	q.calls[k] = c
	delete(q.inflight, id)
}

type endpointKey struct{}

// withEndpoint names the runner call made with ctx, for the statement count of each call.
func withEndpoint(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, endpointKey{}, name)
}

// taggingTransport gives each call named by withEndpoint an X-Request-Id of the form
// bench.<endpoint>.<hex> (the runner sends 32 hex; jobapi echoes and logs either), and settles
// the call's statement count when the answer arrives.
type taggingTransport struct {
	base http.RoundTripper
	q    *queryCounter
}

func (t *taggingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ep, _ := req.Context().Value(endpointKey{}).(string)
	if ep == "" {
		return t.base.RoundTrip(req)
	}
	id := tagPrefix + ep + "." + randHex(8)
	r := req.Clone(req.Context())
	r.Header.Set("X-Request-Id", id)
	resp, err := t.base.RoundTrip(r)
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	t.q.settle(id, callKey{ep, status})
	return resp, err
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the wrapped transport.
func (t *taggingTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// queryCounts is a snapshot of a queryCounter.
type queryCounts struct {
	calls   map[callKey]callQueries
	byRoute map[string]int64
	other   int64
	bySQL   map[string]int64
}

func (q *queryCounter) snapshot() queryCounts {
	if q == nil {
		return queryCounts{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return queryCounts{calls: maps.Clone(q.calls), byRoute: maps.Clone(q.byRoute), other: q.other.Load(),
		bySQL: maps.Clone(q.bySQL)}
}

func (c queryCounts) sub(before queryCounts) queryCounts {
	out := queryCounts{calls: map[callKey]callQueries{}, byRoute: map[string]int64{}, other: c.other - before.other}
	for k, v := range c.calls {
		b := before.calls[k]
		if v.calls != b.calls {
			out.calls[k] = callQueries{calls: v.calls - b.calls, queries: v.queries - b.queries}
		}
	}
	for k, v := range c.byRoute {
		if d := v - before.byRoute[k]; d != 0 {
			out.byRoute[k] = d
		}
	}
	if c.bySQL != nil {
		out.bySQL = map[string]int64{}
		for k, v := range c.bySQL {
			if d := v - before.bySQL[k]; d != 0 {
				out.bySQL[k] = d
			}
		}
	}
	return out
}

// per returns the statements per call of an endpoint, over the given statuses (all when
// none), and whether any such call was counted.
func (c queryCounts) per(endpoint string, statuses ...int) (float64, bool) {
	var n callQueries
	for k, v := range c.calls {
		if k.endpoint == endpoint && (len(statuses) == 0 || slices.Contains(statuses, k.status)) {
			n.calls += v.calls
			n.queries += v.queries
		}
	}
	if n.calls == 0 {
		return 0, false
	}
	return round3(float64(n.queries) / float64(n.calls)), true
}

// requestQueries is every statement run on behalf of an HTTP request.
func (c queryCounts) requestQueries() int64 {
	var n int64
	for _, v := range c.byRoute {
		n += v
	}
	return n
}

// logStatements prints a window's statements by count (--debug-queries).
func (e *env) logStatements(name string, q queryCounts) {
	if q.bySQL == nil {
		return
	}
	type kv struct {
		sql string
		n   int64
	}
	var list []kv
	for k, v := range q.bySQL {
		list = append(list, kv{k, v})
	}
	slices.SortFunc(list, func(a, b kv) int { return int(b.n - a.n) })
	for _, x := range list[:min(len(list), 25)] {
		e.logf("%s: %8d  %.150s", name, x.n, x.sql)
	}
}

// stmtCounter counts statements.
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *stmtCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

var (
	_ pgx.QueryTracer = (*queryCounter)(nil)
	_ pgx.BatchTracer = (*queryCounter)(nil)
	_ pgx.BatchTracer = (*stmtCounter)(nil)
)
