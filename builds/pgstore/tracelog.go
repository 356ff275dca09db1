package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/joblogs"
)

var _ joblogs.Store = (*Store)(nil)

// claimTraceArchives leases a batch of due builds to the caller; SKIP LOCKED keeps
// concurrent passes on disjoint builds, and the lease keeps them apart after the commit.
// For each build not archived yet it lists the key of the object its archive will write
// for cleanup (committed before the object is written: a crash after that leaves the
// artifacts pass a key to remove), and it returns the stored log of those whose log in
// Postgres is at most $7 bytes: a finished build's stored log no longer changes.
const claimTraceArchives = `
WITH due AS (
    SELECT build_id FROM trace_archives
    WHERE due_at <= $1 AND ($4::bigint[] IS NULL OR build_id = ANY($4))
    ORDER BY due_at LIMIT $3
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE trace_archives t SET due_at = $2
    FROM due, builds b
    WHERE t.build_id = due.build_id AND b.id = t.build_id
    RETURNING t.build_id, b.project_id, b.pipeline_id, coalesce(b.payload->>'coverage_regex', '') AS coverage_regex,
        t.attempts, t.archived_at IS NOT NULL AS archived, b.status, b.trace_size,
        CASE WHEN t.archived_at IS NULL THEN 'artifacts/' || b.project_id || '/' || b.id || '/trace-' || $5::text END AS object_key
), k AS (
    INSERT INTO object_cleanup (object_key, due_at) SELECT object_key, $6 FROM c WHERE object_key IS NOT NULL
)
SELECT c.build_id, c.project_id, c.pipeline_id, c.coverage_regex, c.attempts, c.archived, c.status, c.trace_size,
    coalesce(c.object_key, ''), c.object_key IS NOT NULL AND c.trace_size BETWEEN 1 AND $7,
    CASE WHEN c.object_key IS NOT NULL AND c.trace_size BETWEEN 1 AND $7 THEN
        (SELECT string_agg(data, ''::bytea ORDER BY offset_at) FROM build_trace_chunks WHERE build_id = c.build_id) END
FROM c`

// ClaimTraceArchives leases up to c.Limit due builds (of c.IDs, when not nil).
func (s *Store) ClaimTraceArchives(ctx context.Context, c joblogs.ArchiveClaim) ([]joblogs.ArchiveJob, error) {
	rows, err := s.pool.Query(ctx, claimTraceArchives, c.Now, c.Now.Add(c.Lease), c.Limit, c.IDs, c.KeyTag, c.KeyDue, c.InlineMax)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (joblogs.ArchiveJob, error) {
		var j joblogs.ArchiveJob
		var status string
		err := row.Scan(&j.BuildID, &j.ProjectID, &j.PipelineID, &j.CoverageRegex, &j.Attempts, &j.Archived, &status,
			&j.TraceSize, &j.ObjectKey, &j.Inline, &j.Stored)
		j.Status = builds.Status(status)
		return j, err
	})
}

// commitTraceArchive is the archive's bookkeeping in one statement (one implicit
// transaction): it takes the object's key ($9) off the cleanup list, inserts the trace
// artifact unless the build has one (then the key is due for removal at once), stores the
// coverage ($14, when not NULL and the artifact is ours), deletes the stored chunks, and
// either takes the build off the list ($15: nothing of the live log is left outside
// Postgres) or marks it archived (TraceArchiveDone takes it off once the rest is dropped).
// Without a listed key nothing changes. The data-modifying CTEs run in the order of the
// transaction this replaces (cleanup, artifact, coverage, list, chunks); the final SELECT
// reads the artifact only through the INSERT's RETURNING, as the statement's snapshot
// does not see an artifact another replica committed while it ran.
const commitTraceArchive = `
WITH f AS (
    DELETE FROM object_cleanup WHERE object_key = $9 RETURNING object_key
), a AS (
    INSERT INTO job_artifacts (build_id, project_id, pipeline_id, file_type, file_format, filename, size, sha256,
        object_key, created_at, expire_at, access, expose_as)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE(NULLIF($12, ''), 'all'), NULLIF($13, '') FROM f
    ON CONFLICT (build_id, file_type) DO NOTHING
    RETURNING id, access
), requeue AS (
    INSERT INTO object_cleanup (object_key, due_at)
    SELECT object_key, '-infinity' FROM f WHERE NOT EXISTS (SELECT 1 FROM a)
), cov AS (
    UPDATE builds SET coverage = $14 WHERE id = $1 AND $14::float8 IS NOT NULL AND finished_at IS NOT NULL
        AND EXISTS (SELECT 1 FROM a)
), marked AS (
    UPDATE trace_archives SET archived_at = $16, last_error = NULL
    WHERE build_id = $1 AND NOT $15::boolean AND EXISTS (SELECT 1 FROM f)
), done AS (
    DELETE FROM trace_archives WHERE build_id = $1 AND $15::boolean AND EXISTS (SELECT 1 FROM f)
), chunks AS (
    DELETE FROM build_trace_chunks WHERE build_id = $1 AND EXISTS (SELECT 1 FROM f)
)
SELECT EXISTS (SELECT 1 FROM f), (SELECT id FROM a), (SELECT access FROM a)`

// commitEmptyTraceArchive: an empty log has no object (its key, $4, leaves the cleanup
// list); the build leaves the list, or is marked archived when its live log is still to
// be dropped.
const commitEmptyTraceArchive = `
WITH f AS (
    DELETE FROM object_cleanup WHERE object_key = $4
), marked AS (
    UPDATE trace_archives SET archived_at = $2, last_error = NULL WHERE build_id = $1 AND NOT $3::boolean
), chunks AS (
    DELETE FROM build_trace_chunks WHERE build_id = $1
)
DELETE FROM trace_archives WHERE build_id = $1 AND $3::boolean`

// CommitTraceArchive records an archived log, its coverage and the archived mark (or the
// build's leaving the list, when done) and deletes its stored chunks, in one statement.
func (s *Store) CommitTraceArchive(ctx context.Context, buildID int64, key string, a *builds.Artifact, coverage *float64, done bool, now time.Time) (builds.Artifact, bool, error) {
	if a == nil {
		err := retryTx(func() error {
			_, err := s.pool.Exec(ctx, commitEmptyTraceArchive, buildID, now, done, key)
			return err
		})
		return builds.Artifact{}, false, err
	}
	var listed bool
	var id *int64
	var access *string
	err := retryTx(func() error {
		return s.pool.QueryRow(ctx, commitTraceArchive, buildID, a.ProjectID, a.PipelineID, a.FileType,
			a.FileFormat, a.Filename, a.Size, a.SHA256, key, a.CreatedAt, a.ExpireAt, a.Access, a.ExposeAs,
			coverage, done, now).Scan(&listed, &id, &access)
	})
	switch {
	case err != nil:
		return builds.Artifact{}, false, err
	case !listed:
		return builds.Artifact{}, false, builds.ErrUploadExpired
	case id != nil:
		stored := *a
		stored.BuildID, stored.ID, stored.Access = buildID, *id, *access
		return stored, true, nil
	}
	// Archived already (another replica whose lease ran out): ours is redundant, and the
	// artifact of record is read in a snapshot of its own.
	stored, err := scanArtifact(s.pool.QueryRow(ctx, artifactOfType, buildID, builds.ArtifactTypeTrace))
	if err != nil {
		return builds.Artifact{}, false, err
	}
	return stored, false, nil
}

// traceArchiveDone takes an archived build off the list and deletes what is left of its
// stored chunks (an archive committed before the commit deleted them).
const traceArchiveDone = `
WITH d AS (
    DELETE FROM trace_archives WHERE build_id = $1 AND archived_at IS NOT NULL RETURNING build_id
)
DELETE FROM build_trace_chunks WHERE build_id IN (SELECT build_id FROM d)`

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
