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
