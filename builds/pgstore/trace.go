package pgstore

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// appendTrace moves the stored size forward only from the offset the runner sent, and only
// while the build is on a runner; the chunk is written by the same statement.
const appendTrace = `
WITH b AS (
    UPDATE builds SET trace_size = trace_size + $3, updated_at = $4
    WHERE id = $1 AND trace_size = $2 AND status IN ('running', 'canceling')
    RETURNING trace_size, status
), c AS (
    INSERT INTO build_trace_chunks (build_id, offset_at, data) SELECT $1, $2, $5 FROM b
)
SELECT trace_size, status FROM b`

// AppendTrace appends data at offset and returns the new size and the build's state;
// *builds.TraceRangeError when the stored size differs, ErrConflict when the build is no
// longer on a runner.
func (s *Store) AppendTrace(ctx context.Context, id int64, offset int64, data []byte, now time.Time) (int64, builds.Status, error) {
	var size int64
	var status string
	err := s.pool.QueryRow(ctx, appendTrace, id, offset, int64(len(data)), now, data).Scan(&size, &status)
	if !errors.Is(err, pgx.ErrNoRows) {
		return size, builds.Status(status), err
	}
	if err := s.pool.QueryRow(ctx, `SELECT status, trace_size FROM builds WHERE id = $1`, id).Scan(&status, &size); err != nil {
		return 0, "", notFound(err, "build")
	}
	if status != string(builds.StatusRunning) && status != string(builds.StatusCanceling) {
		return 0, builds.Status(status), builds.ErrConflict
	}
	return size, builds.Status(status), &builds.TraceRangeError{Size: size}
}

const traceChunks = `SELECT data FROM build_trace_chunks WHERE build_id = $1 ORDER BY offset_at`

// Trace returns the whole log of a build.
func (s *Store) Trace(ctx context.Context, id int64) ([]byte, error) {
	rows, err := s.pool.Query(ctx, traceChunks, id)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	defer rows.Close()
	for rows.Next() {
		var chunk []byte
		if err := rows.Scan(&chunk); err != nil {
			return nil, err
		}
		buf.Write(chunk)
	}
	return buf.Bytes(), rows.Err()
}

// flushTrace is appendTrace for a chunk of live bytes moving from Redis: the same
// compare-and-set on trace_size and status, and the runner's liveness with it.
const flushTrace = `
WITH b AS (
    UPDATE builds SET trace_size = trace_size + $3, updated_at = greatest(updated_at, $4)
    WHERE id = $1 AND trace_size = $2 AND status IN ('running', 'canceling')
    RETURNING trace_size
), c AS (
    INSERT INTO build_trace_chunks (build_id, offset_at, data) SELECT $1, $2, $5 FROM b
)
SELECT trace_size FROM b`

// FlushTrace stores live bytes at offset when offset is the stored size and the build is
// on a runner, and returns the stored size either way.
func (s *Store) FlushTrace(ctx context.Context, id int64, offset int64, data []byte, now time.Time) (int64, error) {
	var size int64
	err := s.pool.QueryRow(ctx, flushTrace, id, offset, int64(len(data)), now, data).Scan(&size)
	if !errors.Is(err, pgx.ErrNoRows) {
		return size, err
	}
	if err := s.pool.QueryRow(ctx, `SELECT trace_size FROM builds WHERE id = $1`, id).Scan(&size); err != nil {
		return 0, notFound(err, "build")
	}
	return size, nil
}

// traceState records liveness on a build on a runner and reads any build's state and size:
// the UPDATE returns nothing for a build off its runner, the second branch then reads it.
const traceState = `
WITH t AS (
    UPDATE builds SET updated_at = greatest(updated_at, $2)
    WHERE id = $1 AND status IN ('running', 'canceling')
    RETURNING status, trace_size
)
SELECT status, trace_size FROM t
UNION ALL
SELECT status, trace_size FROM builds WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM t)`

// TraceState returns a build's state and stored log size, recording liveness on a running one.
func (s *Store) TraceState(ctx context.Context, id int64, now time.Time) (builds.Status, int64, error) {
	var status string
	var size int64
	if err := s.pool.QueryRow(ctx, traceState, id, now).Scan(&status, &size); err != nil {
		return "", 0, notFound(err, "build")
	}
	return builds.Status(status), size, nil
}

// traceChunksFrom starts at the chunk holding from, found through the primary key.
const traceChunksFrom = `
SELECT offset_at, data FROM build_trace_chunks
WHERE build_id = $1 AND offset_at >= coalesce((SELECT max(offset_at) FROM build_trace_chunks
                                               WHERE build_id = $1 AND offset_at <= $2), 0)
ORDER BY offset_at LIMIT $3`

// TraceChunks returns up to limit chunks of a log from the one holding from on.
func (s *Store) TraceChunks(ctx context.Context, id, from int64, limit int) ([]builds.TraceChunk, error) {
	rows, err := s.pool.Query(ctx, traceChunksFrom, id, from, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[builds.TraceChunk])
}

// DeleteTraceChunks deletes a build's stored chunks.
func (s *Store) DeleteTraceChunks(ctx context.Context, id int64) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM build_trace_chunks WHERE build_id = $1`, id)
	return err
}
