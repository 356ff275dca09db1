package pgstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	createScratch   = "CREATE TABLE scratch (id int PRIMARY KEY, v int NOT NULL)"
	insertRow       = "INSERT INTO scratch (id, v) VALUES ($1, $2)"
	insertReturning = "INSERT INTO scratch (id, v) VALUES ($1, $2) RETURNING v"
	countRows       = "SELECT count(*) FROM scratch"
	// raiseSerialization fails like a serializable transaction that lost a conflict.
	raiseSerialization = "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$"
)

const (
	codeUniqueViolation = "23505"
	codeUndefinedTable  = "42P01"
)

var errBody = errors.New("body gave up")

// pipeFixture is a Store on a pool of its own over a fresh database holding a scratch table.
type pipeFixture struct {
	store *Store
	pool  *pgxpool.Pool // the store's: traced, its connections' writes counted
	peer  *pgxpool.Pool // another session: it sees only what was committed
	trace *recorder
	// writes counts the network writes of the store's connections: one per round trip.
	writes atomic.Int64
	pid    uint32 // backend of the store's connection when the pool holds one
}

func newPipeFixture(t *testing.T, maxConns int32) *pipeFixture {
	t.Helper()
	ctx := t.Context()
	url := testenv.DatabaseURL(t)
	f := &pipeFixture{trace: &recorder{}}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = f.trace
	// A liveness ping on acquire would be a round trip the store did not ask for.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, writes: &f.writes}, nil
	}
	if f.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	if f.peer, err = pgxpool.New(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.peer.Close)
	if _, err := f.peer.Exec(ctx, createScratch); err != nil {
		t.Fatal(err)
	}
	f.store = New(f.pool)
	if maxConns == 1 {
		f.pid = f.backendPID(t)
	}
	f.trace.take()
	return f
}

// committed returns the ids in the scratch table as another session sees them.
func (f *pipeFixture) committed(t *testing.T) []int {
	t.Helper()
	rows, _ := f.peer.Query(t.Context(), "SELECT id FROM scratch ORDER BY id")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatalf("read scratch: %v", err)
	}
	return ids
}

func (f *pipeFixture) assertCommitted(t *testing.T, want ...int) {
	t.Helper()
	if got := f.committed(t); !slices.Equal(got, want) {
		t.Errorf("committed ids = %v, want %v", got, want)
	}
}

func (f *pipeFixture) assertSent(t *testing.T, want ...string) {
	t.Helper()
	if got := f.trace.take(); !slices.Equal(got, want) {
		t.Errorf("statements sent:\n got %q\nwant %q", got, want)
	}
}

func (f *pipeFixture) backendPID(t *testing.T) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire (a connection not released?): %v", err)
	}
	defer conn.Release()
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		t.Errorf("pooled connection's transaction status = %q, want 'I' (idle)", st)
	}
	return conn.Conn().PgConn().PID()
}

// assertClean checks that the pool's one connection is idle, that a new transaction on the
// store commits, and, when sameBackend, that the connection is the one from before the test:
// the ROLLBACK went out, rather than the pool dropping a connection left in a transaction.
func (f *pipeFixture) assertClean(t *testing.T, sameBackend bool) {
	t.Helper()
	if pid := f.backendPID(t); sameBackend && pid != f.pid {
		t.Errorf("store's connection was replaced (backend %d, was %d): it was not rolled back", pid, f.pid)
	}
	const probe = 1000
	err := f.store.inPipeTx(t.Context(), func(tx *pipeTx) error {
		_, err := tx.Exec(t.Context(), insertRow, probe, 0)
		return err
	})
	if err != nil {
		t.Fatalf("transaction after: %v", err)
	}
	tag, err := f.peer.Exec(t.Context(), "DELETE FROM scratch WHERE id = $1", probe)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("transaction after did not commit its row: %v, %v", tag, err)
	}
	f.trace.take()
}

// recorder logs what a connection sends, one line per call: "batch: a; b" or "query: a".
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.log
	r.log = nil
	return l
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add("query: " + d.SQL)
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	r.add("batch: " + strings.Join(sqls, "; "))
	return ctx
}

func (r *recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func batch(sqls ...string) string { return "batch: " + strings.Join(sqls, "; ") }
func query(sql string) string     { return "query: " + sql }

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func TestPipeTxBeginTravelsWithFirstStatementCommitWithLast(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 1)
	ctx := t.Context()
	// body inserts first, first+1 and first+2; visible is what another session sees meanwhile.
	body := func(first int, visible ...int) func(tx *pipeTx) error {
		return func(tx *pipeTx) error {
			var v int
			if err := tx.QueryRow(ctx, insertReturning, first, first*10).Scan(&v); err != nil {
				return err
			}
			if v != first*10 {
				t.Errorf("QueryRow scanned %d, want %d", v, first*10)
			}
			if _, err := tx.Exec(ctx, insertRow, first+1, 0); err != nil {
				return err
			}
			if got := f.committed(t); !slices.Equal(got, visible) {
				t.Errorf("before the commit another session sees %v, want %v", got, visible)
			}
			return execLast(ctx, tx, insertRow, first+2, 0)
		}
	}
	if err := f.store.inPipeTx(ctx, body(1)); err != nil {
		t.Fatal(err)
	}
	f.assertCommitted(t, 1, 2, 3)
	f.assertSent(t,
		batch("begin", insertReturning),
		query(insertRow),
		batch(insertRow, "commit"))

	// Again with every statement prepared: one write per round trip, three in all where
	// pgx.BeginFunc takes five (BEGIN and COMMIT on their own).
	f.writes.Store(0)
	if err := f.store.inPipeTx(ctx, body(4, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if n := f.writes.Load(); n != 3 {
		t.Errorf("round trips = %d, want 3", n)
	}
	f.assertCommitted(t, 1, 2, 3, 4, 5, 6)
	f.assertClean(t, true)
}

func TestPipeTxExecFirst(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 1)
	ctx := t.Context()
	err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
		tag, err := tx.Exec(ctx, insertRow, 1, 0)
		if err != nil {
			return err
		}
		if tag.String() != "INSERT 0 1" {
			t.Errorf("Exec tag = %q, want the statement's, not BEGIN's", tag)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.assertCommitted(t, 1)
	f.assertSent(t, batch("begin", insertRow), batch("commit"))
	f.assertClean(t, true)
}

func TestPipeTxBodyErrorRollsBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body func(ctx context.Context, tx *pipeTx) error
		sent []string
	}{{
		name: "after writing",
		body: func(ctx context.Context, tx *pipeTx) error {
			var v int
			if err := tx.QueryRow(ctx, insertReturning, 1, 0).Scan(&v); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, insertRow, 2, 0); err != nil {
				return err
			}
			return errBody
		},
		sent: []string{batch("begin", insertReturning), query(insertRow), query("rollback")},
	}, {
		name: "after execLast only",
		body: func(ctx context.Context, tx *pipeTx) error {
			if err := execLast(ctx, tx, insertRow, 1, 0); err != nil {
				return err
			}
			return errBody
		},
	}, {
		name: "before any statement",
		body: func(context.Context, *pipeTx) error { return errBody },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPipeFixture(t, 1)
			ctx := t.Context()
			err := f.store.inPipeTx(ctx, func(tx *pipeTx) error { return tt.body(ctx, tx) })
			if !errors.Is(err, errBody) {
				t.Fatalf("inPipeTx = %v, want %v", err, errBody)
			}
			f.assertCommitted(t)
			f.assertSent(t, tt.sent...)
			f.assertClean(t, true)
		})
	}
}

func TestPipeTxStatementErrorRollsBack(t *testing.T) {
	t.Parallel()
	// Row 1 is committed before each body runs: inserting it again is a unique violation.
	tests := []struct {
		name     string
		body     func(ctx context.Context, tx *pipeTx) error
		wantCode string
		wantIs   error
	}{{
		name: "first statement, Exec",
		body: func(ctx context.Context, tx *pipeTx) error {
			_, err := tx.Exec(ctx, insertRow, 1, 0)
			return err
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "first statement, QueryRow",
		body: func(ctx context.Context, tx *pipeTx) error {
			var v int
			return tx.QueryRow(ctx, insertReturning, 1, 0).Scan(&v)
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "first statement, fails to prepare",
		body: func(ctx context.Context, tx *pipeTx) error {
			_, err := tx.Exec(ctx, "INSERT INTO no_such_table VALUES ($1)", 1)
			return err
		},
		wantCode: codeUndefinedTable,
	}, {
		name: "first statement, SendBatch",
		body: func(ctx context.Context, tx *pipeTx) error {
			b := &pgx.Batch{}
			b.Queue(insertRow, 2, 0)
			b.Queue(insertRow, 1, 0)
			br := tx.SendBatch(ctx, b)
			_, err := br.Exec()
			if err == nil {
				_, err = br.Exec()
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return err
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "middle statement",
		body: func(ctx context.Context, tx *pipeTx) error {
			if _, err := tx.Exec(ctx, insertRow, 2, 0); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insertRow, 1, 0)
			return err
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "execLast statement",
		body: func(ctx context.Context, tx *pipeTx) error {
			if _, err := tx.Exec(ctx, insertRow, 2, 0); err != nil {
				return err
			}
			if err := execLast(ctx, tx, insertRow, 3, 0); err != nil {
				return err
			}
			return execLast(ctx, tx, insertRow, 1, 0)
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "execLast statement, nothing sent before",
		body: func(ctx context.Context, tx *pipeTx) error {
			if err := execLast(ctx, tx, insertRow, 2, 0); err != nil {
				return err
			}
			return execLast(ctx, tx, insertRow, 1, 0)
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "queryRowAndCommit statement",
		body: func(ctx context.Context, tx *pipeTx) error {
			if _, err := tx.Exec(ctx, insertRow, 2, 0); err != nil {
				return err
			}
			if err := execLast(ctx, tx, insertRow, 3, 0); err != nil {
				return err
			}
			return tx.queryRowAndCommit(ctx, func(row pgx.Row) error {
				var v int
				return row.Scan(&v)
			}, insertReturning, 1, 0)
		},
		wantCode: codeUniqueViolation,
	}, {
		name: "queryRowAndCommit behind a failing execLast",
		body: func(ctx context.Context, tx *pipeTx) error {
			if err := execLast(ctx, tx, insertRow, 1, 0); err != nil {
				return err
			}
			return tx.queryRowAndCommit(ctx, func(row pgx.Row) error {
				return errors.New("scan called after a failed statement")
			}, insertReturning, 2, 0)
		},
		wantCode: codeUniqueViolation,
	}, {
		// The transaction is aborted, so COMMIT answers ROLLBACK, without an error.
		name: "error ignored by the body",
		body: func(ctx context.Context, tx *pipeTx) error {
			if _, err := tx.Exec(ctx, insertRow, 2, 0); err != nil {
				return err
			}
			_, _ = tx.Exec(ctx, insertRow, 1, 0)
			return nil
		},
		wantIs: pgx.ErrTxCommitRollback,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPipeFixture(t, 1)
			ctx := t.Context()
			if _, err := f.peer.Exec(ctx, insertRow, 1, 0); err != nil {
				t.Fatal(err)
			}
			err := f.store.inPipeTx(ctx, func(tx *pipeTx) error { return tt.body(ctx, tx) })
			if err == nil {
				t.Fatal("inPipeTx succeeded, want an error")
			}
			if tt.wantCode != "" && pgCode(err) != tt.wantCode {
				t.Errorf("inPipeTx = %v, want Postgres error %s", err, tt.wantCode)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("inPipeTx = %v, want %v", err, tt.wantIs)
			}
			f.assertCommitted(t, 1)
			f.assertClean(t, true)
		})
	}
}

func TestPipeTxQueryRowAndCommit(t *testing.T) {
	t.Parallel()
	scanV := func(v *int) func(pgx.Row) error {
		return func(row pgx.Row) error { return row.Scan(v) }
	}
	tests := []struct {
		name      string
		body      func(ctx context.Context, tx *pipeTx, v *int) error
		wantErr   error
		wantV     int
		committed []int
		sent      []string
	}{{
		name: "after a statement and an execLast",
		body: func(ctx context.Context, tx *pipeTx, v *int) error {
			if _, err := tx.Exec(ctx, insertRow, 1, 0); err != nil {
				return err
			}
			if err := execLast(ctx, tx, insertRow, 2, 0); err != nil {
				return err
			}
			return tx.queryRowAndCommit(ctx, scanV(v), insertReturning, 3, 30)
		},
		wantV:     30,
		committed: []int{1, 2, 3},
		sent:      []string{batch("begin", insertRow), batch(insertRow, insertReturning, "commit")},
	}, {
		name: "as the only statement",
		body: func(ctx context.Context, tx *pipeTx, v *int) error {
			return tx.queryRowAndCommit(ctx, scanV(v), insertReturning, 1, 10)
		},
		wantV:     10,
		committed: []int{1},
		sent:      []string{batch("begin", insertReturning, "commit")},
	}, {
		name: "no row still commits",
		body: func(ctx context.Context, tx *pipeTx, v *int) error {
			if err := execLast(ctx, tx, insertRow, 1, 0); err != nil {
				return err
			}
			return tx.queryRowAndCommit(ctx, scanV(v),
				"WITH i AS (INSERT INTO scratch (id, v) VALUES ($1, $2) RETURNING v) SELECT v FROM i WHERE false", 2, 20)
		},
		wantErr:   pgx.ErrNoRows,
		committed: []int{1, 2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPipeFixture(t, 1)
			ctx := t.Context()
			var v int
			err := f.store.inPipeTx(ctx, func(tx *pipeTx) error { return tt.body(ctx, tx, &v) })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("inPipeTx = %v, want %v", err, tt.wantErr)
			}
			if v != tt.wantV {
				t.Errorf("scanned %d, want %d", v, tt.wantV)
			}
			f.assertCommitted(t, tt.committed...)
			if tt.sent != nil {
				f.assertSent(t, tt.sent...)
			}
			f.assertClean(t, true)
		})
	}
}

// An error from scan other than pgx.ErrNoRows fails the transaction like any error of the
// body, so nothing it wrote may be committed.
// TestPipeTxQueryRowAndCommitScanErrorIsCommitted: the COMMIT travels with the statement, so
// a row that does not scan cannot undo it; the caller is told it committed.
func TestPipeTxQueryRowAndCommitScanErrorIsCommitted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		scan func(pgx.Row) error
	}{{
		name: "scan rejects the row",
		scan: func(row pgx.Row) error {
			var v int
			if err := row.Scan(&v); err != nil {
				return err
			}
			return errBody
		},
	}, {
		name: "row does not scan into the destination",
		scan: func(row pgx.Row) error {
			var at time.Time
			return row.Scan(&at)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPipeFixture(t, 1)
			ctx := t.Context()
			err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
				if _, err := tx.Exec(ctx, insertRow, 1, 0); err != nil {
					return err
				}
				return tx.queryRowAndCommit(ctx, tt.scan, insertReturning, 2, 20)
			})
			if !errors.Is(err, ErrCommittedUnread) {
				t.Fatalf("inPipeTx: %v, want ErrCommittedUnread", err)
			}
			f.assertCommitted(t, 1, 2)
			f.assertClean(t, true)
		})
	}
}

func TestPipeTxSendBatchFirst(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 1)
	ctx := t.Context()
	var fromCallback []string
	err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
		b := &pgx.Batch{}
		b.Queue(insertReturning, 1, 10)
		b.Queue(insertRow, 2, 20)
		b.Queue(countRows)
		b.Queue(insertRow, 3, 30).Exec(func(tag pgconn.CommandTag) error {
			fromCallback = append(fromCallback, tag.String())
			return nil
		})
		b.Queue(countRows).QueryRow(func(row pgx.Row) error {
			var n int
			err := row.Scan(&n)
			fromCallback = append(fromCallback, strings.Repeat("*", n))
			return err
		})
		br := tx.SendBatch(ctx, b)
		var v, n int
		if err := br.QueryRow().Scan(&v); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&n); err != nil {
			return err
		}
		if v != 10 || tag.String() != "INSERT 0 1" || n != 2 {
			t.Errorf("results = %d, %q, %d; want 10, \"INSERT 0 1\", 2: the caller's, in order", v, tag, n)
		}
		if err := br.Close(); err != nil { // runs the callbacks of the results not read
			return err
		}
		// Begun: the next batch goes as it is.
		b = &pgx.Batch{}
		b.Queue(insertRow, 4, 40)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return execLast(ctx, tx, insertRow, 5, 50)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"INSERT 0 1", "***"}; !slices.Equal(fromCallback, want) {
		t.Errorf("callbacks saw %q, want %q", fromCallback, want)
	}
	f.assertCommitted(t, 1, 2, 3, 4, 5)
	f.assertSent(t,
		batch("begin", insertReturning, insertRow, countRows, insertRow, countRows),
		batch(insertRow),
		batch(insertRow, "commit"))
	f.assertClean(t, true)
}

func TestPipeTxQueryFirst(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 1)
	ctx := t.Context()
	const insertSeries = "INSERT INTO scratch (id, v) SELECT g, 0 FROM generate_series(1, $1::int) g RETURNING id"
	err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
		rows, err := tx.Query(ctx, insertSeries, 3)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		if want := []int{1, 2, 3}; !slices.Equal(ids, want) {
			t.Errorf("Query returned %v, want %v", ids, want)
		}
		return execLast(ctx, tx, insertRow, 4, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.assertCommitted(t, 1, 2, 3, 4)
	f.assertSent(t, query("begin"), query(insertSeries), batch(insertRow, "commit"))
	f.assertClean(t, true)
}

func TestPipeTxEmptyBodySendsNothing(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 1)
	f.writes.Store(0)
	if err := f.store.inPipeTx(t.Context(), func(*pipeTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.assertSent(t)
	if n := f.writes.Load(); n != 0 {
		t.Errorf("round trips = %d, want 0", n)
	}
	f.assertClean(t, true)
}

func TestPipeTxContextCanceledMidBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// after runs once ctx is canceled, the transaction begun.
		after func(ctx context.Context, tx *pipeTx) error
	}{{
		name: "Exec",
		after: func(ctx context.Context, tx *pipeTx) error {
			_, err := tx.Exec(ctx, insertRow, 2, 0)
			return err
		},
	}, {
		name: "QueryRow",
		after: func(ctx context.Context, tx *pipeTx) error {
			var v int
			return tx.QueryRow(ctx, insertReturning, 2, 0).Scan(&v)
		},
	}, {
		name: "SendBatch",
		after: func(ctx context.Context, tx *pipeTx) error {
			b := &pgx.Batch{}
			b.Queue(insertRow, 2, 0)
			return tx.SendBatch(ctx, b).Close()
		},
	}, {
		name: "execLast, error ignored",
		after: func(ctx context.Context, tx *pipeTx) error {
			_ = execLast(ctx, tx, insertRow, 2, 0)
			return nil
		},
	}, {
		name: "queryRowAndCommit",
		after: func(ctx context.Context, tx *pipeTx) error {
			return tx.queryRowAndCommit(ctx, func(row pgx.Row) error {
				var v int
				return row.Scan(&v)
			}, insertReturning, 2, 0)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPipeFixture(t, 1)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
				if _, err := tx.Exec(ctx, insertRow, 1, 0); err != nil {
					return err
				}
				cancel()
				return tt.after(ctx, tx)
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("inPipeTx = %v, want %v", err, context.Canceled)
			}
			f.assertCommitted(t)
			f.assertClean(t, true)
		})
	}

	// Canceled while a statement runs: pgx closes the connection, the pool replaces it.
	t.Run("during a statement", func(t *testing.T) {
		t.Parallel()
		f := newPipeFixture(t, 1)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
			if _, err := tx.Exec(ctx, insertRow, 1, 0); err != nil {
				return err
			}
			time.AfterFunc(100*time.Millisecond, cancel)
			_, err := tx.Exec(ctx, "SELECT pg_sleep(3)")
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("inPipeTx = %v, want %v", err, context.Canceled)
		}
		f.assertCommitted(t)
		f.assertClean(t, false)
	})
}

func TestPipeTxRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// failing is sent instead of the statement of the first attempts, failing them.
		failing  func(ctx context.Context, tx *pipeTx) error
		failures int
		wantErr  bool
	}{{
		name: "in a statement",
		failing: func(ctx context.Context, tx *pipeTx) error {
			_, err := tx.Exec(ctx, raiseSerialization)
			return err
		},
		failures: 1,
	}, {
		name: "in an execLast statement",
		failing: func(ctx context.Context, tx *pipeTx) error {
			return execLast(ctx, tx, raiseSerialization)
		},
		failures: 3,
	}, {
		name: "every attempt",
		failing: func(ctx context.Context, tx *pipeTx) error {
			return execLast(ctx, tx, raiseSerialization)
		},
		failures: 4,
		wantErr:  true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newPipeFixture(t, 1)
			ctx := t.Context()
			attempts := 0
			err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
				attempts++
				if _, err := tx.Exec(ctx, insertRow, 1, 0); err != nil {
					return err
				}
				if attempts <= tt.failures {
					return tt.failing(ctx, tx)
				}
				return execLast(ctx, tx, insertRow, 2, 0)
			})
			if tt.wantErr {
				if pgCode(err) != "40001" {
					t.Errorf("inPipeTx = %v, want the serialization failure", err)
				}
				if attempts != 4 {
					t.Errorf("attempts = %d, want 4", attempts)
				}
				f.assertCommitted(t)
			} else {
				if err != nil {
					t.Fatalf("inPipeTx = %v", err)
				}
				if attempts != tt.failures+1 {
					t.Errorf("attempts = %d, want %d", attempts, tt.failures+1)
				}
				f.assertCommitted(t, 1, 2)
			}
			f.assertClean(t, true)
		})
	}
}

// Two transactions lock two rows in opposite orders; Postgres aborts one of them, which
// runs again once the other has committed.
func TestPipeTxRetriesDeadlock(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 2)
	ctx := t.Context()
	if _, err := f.peer.Exec(ctx, "INSERT INTO scratch (id, v) VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	const bump = "UPDATE scratch SET v = v + 1 WHERE id = $1"
	var (
		bothLocked sync.WaitGroup
		attempts   atomic.Int32
		errs       = make(chan error, 2)
	)
	bothLocked.Add(2)
	for _, order := range [][2]int{{1, 2}, {2, 1}} {
		go func() {
			first := true
			errs <- f.store.inPipeTx(ctx, func(tx *pipeTx) error {
				attempts.Add(1)
				if _, err := tx.Exec(ctx, bump, order[0]); err != nil {
					return err
				}
				if first {
					first = false
					bothLocked.Done()
					bothLocked.Wait()
				}
				return execLast(ctx, tx, bump, order[1])
			})
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("inPipeTx = %v", err)
		}
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("attempts = %d, want 3 (one retried after the deadlock)", n)
	}
	var sum int
	if err := f.peer.QueryRow(ctx, "SELECT sum(v) FROM scratch").Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 4 {
		t.Errorf("sum of v = %d, want 4: both transactions committed once", sum)
	}
}

// TestPipeTxRefusesStatementsAfterCommit: after queryRowAndCommit a statement would run
// outside the transaction (and an execLast would be dropped): both are refused.
func TestPipeTxRefusesStatementsAfterCommit(t *testing.T) {
	t.Parallel()
	f := newPipeFixture(t, 1)
	ctx := t.Context()
	var afterExec, afterLast error
	err := f.store.inPipeTx(ctx, func(tx *pipeTx) error {
		if err := tx.queryRowAndCommit(ctx, func(row pgx.Row) error { var v int; return row.Scan(&v) },
			insertReturning, 1, 10); err != nil {
			return err
		}
		_, afterExec = tx.Exec(ctx, insertRow, 2, 20)
		afterLast = execLast(ctx, tx, insertRow, 3, 30)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(afterExec, errAfterCommit) || !errors.Is(afterLast, errAfterCommit) {
		t.Fatalf("after commit: Exec %v, execLast %v; want errAfterCommit", afterExec, afterLast)
	}
	f.assertCommitted(t, 1)
	f.assertClean(t, true)
}
