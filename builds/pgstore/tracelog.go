package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

var _ builds.TraceArchiveStore = (*Store)(nil)

// claimTraceArchives leases a batch of due builds to the caller; SKIP LOCKED keeps
// concurrent passes on disjoint builds, and the lease keeps them apart after the commit.
const claimTraceArchives = `
WITH due AS (
    SELECT build_id FROM trace_archives
    WHERE due_at <= $1 AND ($4::bigint[] IS NULL OR build_id = ANY($4))
    ORDER BY due_at LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE trace_archives t SET due_at = $2
FROM due, builds b
WHERE t.build_id = due.build_id AND b.id = t.build_id
RETURNING t.build_id, b.project_id, b.pipeline_id, coalesce(b.payload->>'coverage_regex', ''), t.attempts,
    t.archived_at IS NOT NULL`

// ClaimTraceArchives leases up to limit due builds (of ids, when not nil).
func (s *Store) ClaimTraceArchives(ctx context.Context, now time.Time, lease time.Duration, limit int, ids []int64) ([]builds.TraceArchiveJob, error) {
	rows, err := s.pool.Query(ctx, claimTraceArchives, now, now.Add(lease), limit, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.TraceArchiveJob, error) {
		var j builds.TraceArchiveJob
		err := row.Scan(&j.BuildID, &j.ProjectID, &j.PipelineID, &j.CoverageRegex, &j.Attempts, &j.Archived)
		return j, err
	})
}

const markTraceArchived = `UPDATE trace_archives SET archived_at = $2, last_error = NULL WHERE build_id = $1`

const setCoverage = `UPDATE builds SET coverage = $2 WHERE id = $1 AND finished_at IS NOT NULL`

// CommitTraceArchive records an archived log, its coverage and the archived mark in one
// transaction.
func (s *Store) CommitTraceArchive(ctx context.Context, buildID int64, a *builds.Artifact, coverage *float64, now time.Time) (builds.Artifact, bool, error) {
	var stored builds.Artifact
	var created bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		created = false
		if a != nil {
			tag, err := tx.Exec(ctx, forgetUpload, a.ObjectKey)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return builds.ErrUploadExpired
			}
			stored, err = scanArtifact(tx.QueryRow(ctx, insertArtifact, a.BuildID, a.ProjectID, a.PipelineID, a.FileType,
				a.FileFormat, a.Filename, a.Size, a.SHA256, a.ObjectKey, a.CreatedAt, a.ExpireAt, a.Access, a.ExposeAs))
			switch {
			case err == nil:
				created = true
			case errors.Is(err, pgx.ErrNoRows):
				// Archived already (another replica whose lease ran out): ours is redundant.
				if _, err := tx.Exec(ctx, requeueNow, a.ObjectKey); err != nil {
					return err
				}
				if stored, err = scanArtifact(tx.QueryRow(ctx, artifactOfType, buildID, builds.ArtifactTypeTrace)); err != nil {
					return err
				}
			default:
				return err
			}
		}
		if coverage != nil && created {
			if _, err := tx.Exec(ctx, setCoverage, buildID, *coverage); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, markTraceArchived, buildID, now)
		return err
	})
	if err != nil {
		return builds.Artifact{}, false, err
	}
	return stored, created, nil
}

const traceArchiveDone = `DELETE FROM trace_archives WHERE build_id = $1 AND archived_at IS NOT NULL`

// TraceArchiveDone takes an archived build off the list.
func (s *Store) TraceArchiveDone(ctx context.Context, buildID int64) error {
	_, err := s.pool.Exec(ctx, traceArchiveDone, buildID)
	return err
}

const deferTraceArchive = `
UPDATE trace_archives SET due_at = $2, attempts = attempts + 1, last_error = left($3, 1000) WHERE build_id = $1`

// DeferTraceArchive counts a failed attempt and makes the build due at due.
func (s *Store) DeferTraceArchive(ctx context.Context, buildID int64, due time.Time, cause string) error {
	_, err := s.pool.Exec(ctx, deferTraceArchive, buildID, due, cause)
	return err
}

// TraceArtifact returns a build's archived log.
func (s *Store) TraceArtifact(ctx context.Context, buildID int64) (builds.Artifact, error) {
	a, err := scanArtifact(s.pool.QueryRow(ctx, artifactOfType, buildID, builds.ArtifactTypeTrace))
	return a, notFound(err, fmt.Sprintf("archived log of build %d", buildID))
}

const traceArchiveBacklog = `
SELECT count(*), coalesce(extract(epoch FROM $1 - min(b.finished_at) FILTER (WHERE t.archived_at IS NULL)), 0)::float8
FROM trace_archives t JOIN builds b ON b.id = t.build_id`

// TraceArchiveBacklog counts the listed builds and the age of the oldest unarchived one.
func (s *Store) TraceArchiveBacklog(ctx context.Context, now time.Time) (int64, time.Duration, error) {
	var n int64
	var secs float64
	if err := s.pool.QueryRow(ctx, traceArchiveBacklog, now).Scan(&n, &secs); err != nil {
		return 0, 0, err
	}
	return n, time.Duration(max(secs, 0) * float64(time.Second)), nil
}
