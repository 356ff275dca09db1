package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier is what transaction bodies use: a pgx.Tx, or a pipeTx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pipeTx is a transaction on one pooled connection whose BEGIN travels with its first
// statement (a pipelined batch) and whose COMMIT travels with the statements deferred by
// execLast. (pgx's Batch.BeginTx pipelines the BEGIN, but a pgx.Tx always sends its COMMIT
// alone, hence this type.) On the hot paths (a claim, a finish) that is two round trips fewer than
// pgx.BeginFunc, and the locks a transaction takes are held one round trip less: the
// pipeline row lock that concurrent finishes of one pipeline queue on above all.
type pipeTx struct {
	conn      *pgxpool.Conn
	begun     bool
	committed bool
	last      []queued
}

type queued struct {
	sql  string
	args []any
}

var _ querier = (*pipeTx)(nil)

// inPipeTx is inTx with a pipeTx.
func (s *Store) inPipeTx(ctx context.Context, fn func(tx *pipeTx) error) error {
	return translate(retryTx(func() error { return s.pipeTxOnce(ctx, fn) }))
}

func (s *Store) pipeTxOnce(ctx context.Context, fn func(tx *pipeTx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// pgxpool destroys a connection released inside a transaction, so a failed ROLLBACK
	// cannot leak an open transaction to the next user.
	defer conn.Release()
	t := &pipeTx{conn: conn}
	if err := fn(t); err != nil {
		t.rollback(ctx)
		return err
	}
	if err := t.commit(ctx); err != nil {
		t.rollback(ctx)
		return err
	}
	return nil
}

func (t *pipeTx) rollback(ctx context.Context) {
	if !t.begun || t.committed {
		return
	}
	// A canceled ctx must not keep the ROLLBACK from going out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := t.conn.Exec(ctx, "rollback"); err != nil {
		_ = t.conn.Conn().Close(ctx)
	}
}

// commit sends the deferred statements and COMMIT in one round trip.
func (t *pipeTx) commit(ctx context.Context) error {
	if t.committed || !t.begun && len(t.last) == 0 {
		return nil
	}
	return t.commitBatch(ctx, nil, nil)
}

// execLast queues a statement whose result nobody reads until the COMMIT, which it then
// travels with; its error is the commit's. On a plain pgx.Tx it runs at once.
func execLast(ctx context.Context, q querier, sql string, args ...any) error {
	if t, ok := q.(*pipeTx); ok {
		if t.committed {
			return errAfterCommit
		}
		t.last = append(t.last, queued{sql: sql, args: args})
		return nil
	}
	_, err := q.Exec(ctx, sql, args...)
	return err
}

// ErrCommittedUnread: the row that travelled with a COMMIT could not be read, and the
// transaction committed (or, the connection lost, may have). Nothing can be undone: the
// caller must leave what it wrote to the sweepers and reapers (a claimed build that nobody
// received is timed out and retried).
var ErrCommittedUnread = errors.New("committed, but its row could not be read")

// errAfterCommit refuses statements once a pipeTx committed: they would run outside it.
var errAfterCommit = errors.New("pipeTx: statement after commit")

// queryRowAndCommit runs sql, hands its row to scan and commits, in one round trip with
// whatever execLast deferred. The COMMIT reaches Postgres before the row is read, so scan
// cannot veto it: pgx.ErrNoRows from scan still commits and is returned, and any other
// scan error comes back wrapped in ErrCommittedUnread.
func (t *pipeTx) queryRowAndCommit(ctx context.Context, scan func(pgx.Row) error, sql string, args ...any) error {
	if t.committed {
		return errAfterCommit
	}
	return t.commitBatch(ctx, &queued{sql: sql, args: args}, scan)
}

// commitBatch sends BEGIN (unless sent), the statements execLast deferred, final (when
// set, its row handed to scan) and COMMIT as one batch, and reads their answers in order.
func (t *pipeTx) commitBatch(ctx context.Context, final *queued, scan func(pgx.Row) error) error {
	b := &pgx.Batch{}
	if !t.begun {
		b.Queue("begin")
	}
	t.begun = true
	for _, q := range t.last {
		b.Queue(q.sql, q.args...)
	}
	t.last = nil
	if final != nil {
		b.Queue(final.sql, final.args...)
	}
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	plain := b.Len() - 1 // answers read with Exec before final's row and the COMMIT
	if final != nil {
		plain--
	}
	var err error
	for i := 0; i < plain && err == nil; i++ {
		_, err = br.Exec()
	}
	var scanErr error
	if err == nil && final != nil {
		// A statement error skips the COMMIT (Postgres ignores the rest of a failed batch):
		// it is the batch's error. A scan error is ours, after the fact.
		scanErr = scan(br.QueryRow())
		var pgErr *pgconn.PgError
		switch {
		case errors.As(scanErr, &pgErr), ctx.Err() != nil, pgconn.SafeToRetry(scanErr), pgconn.Timeout(scanErr):
			// The statement failed, or the batch never went out or was cut off: roll back
			// (on a broken connection the ROLLBACK fails and the connection is dropped).
			err = scanErr
		case scanErr != nil && !errors.Is(scanErr, pgx.ErrNoRows):
			// pgx keeps answering with this error, so the COMMIT's own answer is lost to us;
			// the statement succeeded, and nothing after it but the COMMIT was sent.
			_ = br.Close()
			t.committed = true
			return fmt.Errorf("%w: %w", ErrCommittedUnread, scanErr)
		}
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("commit answered %q: %w", tag.String(), pgx.ErrTxCommitRollback)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	t.committed = true
	return scanErr
}

// begin returns the BEGIN to send before the next statement, once.
func (t *pipeTx) begin(ctx context.Context) error {
	if t.begun {
		return nil
	}
	t.begun = true
	_, err := t.conn.Exec(ctx, "begin")
	return err
}

// QueryRow sends BEGIN with the first statement (through SendBatch).
func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.committed {
		return errRow{errAfterCommit}
	}
	if t.begun {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	br := t.SendBatch(ctx, oneStatement(sql, args))
	return &batchRow{row: br.QueryRow(), br: br}
}

// Exec sends BEGIN with the first statement (through SendBatch).
func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.committed {
		return pgconn.CommandTag{}, errAfterCommit
	}
	if t.begun {
		return t.conn.Exec(ctx, sql, args...)
	}
	br := t.SendBatch(ctx, oneStatement(sql, args))
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func oneStatement(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return b
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.committed {
		return nil, errAfterCommit
	}
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.committed {
		return pgx.FailedBatchResults(b, errAfterCommit)
	}
	if !t.begun {
		// BEGIN leads the batch; its result is read here so that the caller's come first.
		t.begun = true
		nb := &pgx.Batch{}
		nb.Queue("begin")
		nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
		br := t.conn.SendBatch(ctx, nb)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return pgx.FailedBatchResults(b, err)
		}
		return br
	}
	return t.conn.SendBatch(ctx, b)
}

type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r *batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
