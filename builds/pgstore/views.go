package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/views"
)

var _ views.Store = (*Store)(nil)

const pipelineListCols = `id, project_id, ref, sha, stages, timeout_strategy, status, created_at, updated_at,
    finished_at, iid, source, before_sha, variables`

// pipelineRunsJoin adds to a pipeline row what its durations need without its builds
// (builds.PipelineRuns): its first start, and the latest attempts' run periods.
const pipelineRunsJoin = ` LEFT JOIN LATERAL (SELECT min(b.started_at) AS first_started,
        array_agg(b.started_at ORDER BY b.id) FILTER (WHERE b.retried_by IS NULL AND b.started_at IS NOT NULL) AS starts,
        array_agg(b.finished_at ORDER BY b.id) FILTER (WHERE b.retried_by IS NULL AND b.started_at IS NOT NULL) AS ends
    FROM builds b WHERE b.pipeline_id = pipelines.id) runs ON true`

// Pipelines lists pipelines newest first. The conditions are written into the statement
// only when set (their values stay bound), so that a project's listing walks
// pipelines_project_idx backwards instead of a plan made for every project.
func (s *Store) Pipelines(ctx context.Context, f views.PipelineFilter, p builds.Page) ([]builds.Pipeline, bool, error) {
	var where []string
	args := []any{}
	if f.ProjectID != 0 {
		args = append(args, f.ProjectID)
		where = append(where, "project_id = $"+strconv.Itoa(len(args)))
	}
	if f.Status != "" {
		args = append(args, f.Status)
		where = append(where, "status = $"+strconv.Itoa(len(args)))
	}
	q := `SELECT ` + pipelineListCols + `, runs.first_started, runs.starts, runs.ends FROM pipelines` + pipelineRunsJoin
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit, off := offset(p)
	args = append(args, limit+1, off)
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d OFFSET $%d`, len(args)-1, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, false, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Pipeline, error) {
		var p builds.Pipeline
		var (
			runs   builds.PipelineRuns
			starts []time.Time
			ends   []*time.Time
		)
		err := row.Scan(&p.ID, &p.ProjectID, &p.Ref, &p.SHA, &p.Stages, &p.TimeoutStrategy, &p.Status,
			&p.CreatedAt, &p.UpdatedAt, &p.FinishedAt, &p.IID, &p.Source, &p.BeforeSHA, &p.Variables,
			&runs.FirstStarted, &starts, &ends)
		if err != nil || len(starts) != len(ends) {
			return p, err
		}
		for i, s := range starts {
			runs.Periods = append(runs.Periods, builds.RunPeriod{Started: s, Finished: ends[i]})
		}
		p.Runs = &runs
		return p, nil
	})
	if err != nil {
		return nil, false, err
	}
	more := len(list) > limit
	if more {
		list = list[:limit]
	}
	return list, more, nil
}

// PipelineSummaries reads, for each listed pipeline that has jobs, whether a latest job
// failed with allow_failure and the average coverage of its latest jobs: one grouped read
// through builds_pipeline_idx for a page of pipelines.
func (s *Store) PipelineSummaries(ctx context.Context, ids []int64) (map[int64]views.PipelineSummary, error) {
	out := make(map[int64]views.PipelineSummary, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
SELECT pipeline_id, bool_or(status = 'failed' AND allow_failure), avg(coverage)::float8
FROM builds WHERE pipeline_id = ANY($1) AND retried_by IS NULL
GROUP BY pipeline_id`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var sum views.PipelineSummary
		if err := rows.Scan(&id, &sum.Warnings, &sum.Coverage); err != nil {
			return nil, err
		}
		out[id] = sum
	}
	return out, rows.Err()
}

// traceRange cuts [from, to) out of the chunks that overlap it: the chunk holding from is
// found through the primary key (build_id, offset_at), and only the bytes asked for leave
// the server.
const traceRange = `
SELECT substring(data FROM (greatest($2 - offset_at, 0) + 1)::int
                      FOR (least(offset_at + length(data), $3) - greatest(offset_at, $2))::int)
FROM build_trace_chunks
WHERE build_id = $1 AND offset_at < $3
  AND offset_at >= coalesce((SELECT max(offset_at) FROM build_trace_chunks
                             WHERE build_id = $1 AND offset_at <= $2), 0)
ORDER BY offset_at`

// TraceRange returns up to max bytes of a log from offset from, and the log's size.
func (s *Store) TraceRange(ctx context.Context, id, from, max int64) ([]byte, int64, error) {
	var size int64
	if err := s.pool.QueryRow(ctx, `SELECT trace_size FROM builds WHERE id = $1`, id).Scan(&size); err != nil {
		return nil, 0, notFound(err, fmt.Sprintf("build %d", id))
	}
	from = min(max0(from), size)
	to := min(from+max0(max), size)
	if to <= from {
		return []byte{}, size, nil
	}
	rows, err := s.pool.Query(ctx, traceRange, id, from, to)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := make([]byte, 0, to-from)
	for rows.Next() {
		var part []byte
		if err := rows.Scan(&part); err != nil {
			return nil, 0, err
		}
		out = append(out, part...)
	}
	return out, size, rows.Err()
}

func max0(v int64) int64 { return max(v, 0) }

// traceLines counts line breaks inside Postgres, so that numbering the tail of a 100 MB log
// ships one number, not the log: encode(…, 'escape') turns the bytes into text that keeps
// every newline as it is (only NUL, backslash and bytes above 0x7e are escaped).
const traceLines = `
SELECT coalesce(sum(length(e) - length(replace(e, E'\n', ''))), 0)::bigint
FROM (SELECT encode(CASE WHEN offset_at + length(data) > $2
                         THEN substring(data FROM 1 FOR ($2 - offset_at)::int) ELSE data END, 'escape') AS e
      FROM build_trace_chunks WHERE build_id = $1 AND offset_at < $2) c`

// TraceLines counts the line breaks in the first before bytes of a log.
func (s *Store) TraceLines(ctx context.Context, id, before int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, traceLines, id, before).Scan(&n)
	return n, err
}

// recentEvents reads a window at the end of build_events by its primary key: no index on
// type or time is needed, and the cost does not grow with the table.
const recentEvents = `
SELECT e.id, e.type, e.at, e.runner_manager, e.detail, b.id, b.project_id, b.pipeline_id, b.name, b.attempt
FROM build_events e JOIN builds b ON b.id = e.build_id
WHERE e.id > (SELECT coalesce(max(id), 0) FROM build_events) - $2 AND e.type = ANY($1)
ORDER BY e.id DESC LIMIT $3`

// RecentEvents returns events of the given types among the latest window, newest first.
func (s *Store) RecentEvents(ctx context.Context, types []string, window, limit int) ([]views.BuildEvent, error) {
	rows, err := s.pool.Query(ctx, recentEvents, types, window, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (views.BuildEvent, error) {
		var e views.BuildEvent
		err := row.Scan(&e.ID, &e.Type, &e.At, &e.RunnerManager, &e.Detail, &e.BuildID, &e.ProjectID,
			&e.PipelineID, &e.Name, &e.Attempt)
		return e, err
	})
}

const ackLatencies = `
SELECT (detail->>'assign_to_ack_seconds')::float8 FROM build_events
WHERE id > (SELECT coalesce(max(id), 0) FROM build_events) - $1
  AND type = 'acknowledged' AND detail ? 'assign_to_ack_seconds'`

// AckLatencies returns the assign-to-ack seconds of the acknowledgements in the window.
func (s *Store) AckLatencies(ctx context.Context, window int) ([]float64, error) {
	rows, err := s.pool.Query(ctx, ackLatencies, window)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[float64])
}
