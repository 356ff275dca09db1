package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
)

var _ artifacts.Store = (*Store)(nil)

const artifactCols = `id, build_id, project_id, pipeline_id, file_type, file_format, filename, size, sha256,
    object_key, created_at, expire_at, access, COALESCE(expose_as, '')`

func scanArtifact(row pgx.Row) (builds.Artifact, error) {
	var a builds.Artifact
	err := row.Scan(&a.ID, &a.BuildID, &a.ProjectID, &a.PipelineID, &a.FileType, &a.FileFormat, &a.Filename,
		&a.Size, &a.SHA256, &a.ObjectKey, &a.CreatedAt, &a.ExpireAt, &a.Access, &a.ExposeAs)
	return a, err
}

const beginUpload = `INSERT INTO object_cleanup (object_key, due_at) VALUES ($1, $2)`

// BeginUpload lists key for cleanup at due.
func (s *Store) BeginUpload(ctx context.Context, key string, due time.Time) error {
	_, err := s.pool.Exec(ctx, beginUpload, key, due)
	return err
}

// forgetUpload takes an upload's key off the cleanup list as its artifact commits; no row
// means the artifacts pass took the key (the upload ran past its timeout).
const forgetUpload = `DELETE FROM object_cleanup WHERE object_key = $1`

const insertArtifact = `
INSERT INTO job_artifacts (build_id, project_id, pipeline_id, file_type, file_format, filename, size, sha256,
    object_key, created_at, expire_at, access, expose_as)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE(NULLIF($12, ''), 'all'), NULLIF($13, ''))
ON CONFLICT (build_id, file_type) DO NOTHING
RETURNING ` + artifactCols

const artifactOfType = `SELECT ` + artifactCols + ` FROM job_artifacts WHERE build_id = $1 AND file_type = $2`

const requeueNow = `INSERT INTO object_cleanup (object_key, due_at) VALUES ($1, '-infinity')`

// CommitArtifact inserts a and takes its key off the cleanup list, in one transaction.
func (s *Store) CommitArtifact(ctx context.Context, a builds.Artifact) (builds.Artifact, bool, error) {
	var stored builds.Artifact
	var created, conflict bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		created, conflict = false, false
		tag, err := tx.Exec(ctx, forgetUpload, a.ObjectKey)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return builds.ErrUploadExpired
		}
		stored, err = scanArtifact(tx.QueryRow(ctx, insertArtifact, a.BuildID, a.ProjectID, a.PipelineID, a.FileType,
			a.FileFormat, a.Filename, a.Size, a.SHA256, a.ObjectKey, a.CreatedAt, a.ExpireAt, a.Access, a.ExposeAs))
		if err == nil {
			created = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The job has an artifact of this type: the new object is redundant either way.
		if _, err := tx.Exec(ctx, requeueNow, a.ObjectKey); err != nil {
			return err
		}
		if stored, err = scanArtifact(tx.QueryRow(ctx, artifactOfType, a.BuildID, a.FileType)); err != nil {
			return err
		}
		conflict = string(stored.SHA256) != string(a.SHA256)
		return nil
	})
	switch {
	case err != nil:
		return builds.Artifact{}, false, err
	case conflict:
		return builds.Artifact{}, false, artifacts.ErrExists
	}
	return stored, created, nil
}

const discardUpload = `UPDATE object_cleanup SET due_at = '-infinity' WHERE object_key = $1`

// DiscardUpload makes key due at once.
func (s *Store) DiscardUpload(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, discardUpload, key)
	return err
}

// ForgetObject takes key off the cleanup list.
func (s *Store) ForgetObject(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, forgetUpload, key)
	return err
}

const artifactsOf = `SELECT ` + artifactCols + ` FROM job_artifacts WHERE build_id = $1
ORDER BY file_type <> 'archive', file_type`

// Artifacts lists a build's artifacts, archive first.
func (s *Store) Artifacts(ctx context.Context, buildID int64) ([]builds.Artifact, error) {
	rows, err := s.pool.Query(ctx, artifactsOf, buildID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Artifact, error) { return scanArtifact(row) })
}

const artifactsOfBuilds = `SELECT ` + artifactCols + ` FROM job_artifacts WHERE build_id = ANY($1)
ORDER BY build_id, file_type <> 'archive', file_type`

// ArtifactsOf lists the artifacts of several builds, by build, archive first.
func (s *Store) ArtifactsOf(ctx context.Context, buildIDs []int64) (map[int64][]builds.Artifact, error) {
	rows, err := s.pool.Query(ctx, artifactsOfBuilds, buildIDs)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Artifact, error) { return scanArtifact(row) })
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]builds.Artifact)
	for _, a := range list {
		out[a.BuildID] = append(out[a.BuildID], a)
	}
	return out, nil
}

// The dependent build is found by its token among builds on a runner, through the partial
// index builds_running_token_idx (the predicate is the index's).
const buildByRunningToken = `SELECT ` + buildCols + ` FROM builds b` + buildJoins + `
WHERE b.token_hash = $1 AND b.status IN ('running', 'canceling')`

// DependencyArtifact reads the dependent build, the build asked for and its archive, in one
// round trip.
func (s *Store) DependencyArtifact(ctx context.Context, id int64, tokenHash []byte) (artifacts.DependencyDownload, error) {
	var d artifacts.DependencyDownload
	batch := &pgx.Batch{}
	batch.Queue(buildByRunningToken, tokenHash)
	batch.Queue(buildByID, id)
	batch.Queue(artifactOfType, id, builds.ArtifactTypeArchive)
	res := s.pool.SendBatch(ctx, batch)
	defer res.Close()
	dependent, err := scanBuild(res.QueryRow())
	if err != nil {
		return d, notFound(err, "running build with the job token")
	}
	d.Dependent = dependent
	b, err := scanBuild(res.QueryRow())
	switch {
	case err == nil:
		d.Build = &b
	case !errors.Is(err, pgx.ErrNoRows):
		return d, err
	}
	a, err := scanArtifact(res.QueryRow())
	switch {
	case err == nil:
		d.Archive = &a
	case !errors.Is(err, pgx.ErrNoRows):
		return d, err
	}
	return d, res.Close()
}

// The trigger job_artifacts_cleanup queues each deleted row's object. The archived log is
// not erasable, as in GitLab (Ci::JobArtifact::NON_ERASABLE_FILE_TYPES).
const deleteArtifacts = `DELETE FROM job_artifacts WHERE build_id = $1 AND file_type <> 'trace' RETURNING ` + artifactCols

// DeleteArtifacts removes a build's artifacts but its archived log; their objects are
// queued by the table's trigger.
func (s *Store) DeleteArtifacts(ctx context.Context, buildID int64) ([]builds.Artifact, error) {
	rows, err := s.pool.Query(ctx, deleteArtifacts, buildID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Artifact, error) { return scanArtifact(row) })
}

// expireArtifacts deletes a batch of expired artifacts, oldest expiry first. The latest
// successful pipeline of each project and ref keeps its artifacts, as GitLab's "keep the
// latest artifacts" does: once a newer pipeline of the ref succeeds, they expire as usual.
const expireArtifacts = `
WITH doomed AS (
    SELECT a.id FROM job_artifacts a
    WHERE a.expire_at <= $1
      AND NOT EXISTS (
          SELECT 1 FROM pipelines p
          WHERE p.id = a.pipeline_id AND p.status = 'success'
            AND NOT EXISTS (SELECT 1 FROM pipelines n WHERE n.project_id = p.project_id AND n.ref = p.ref
                            AND n.status = 'success' AND n.id > p.id))
    ORDER BY a.expire_at
    LIMIT $2
    FOR UPDATE OF a SKIP LOCKED
)
DELETE FROM job_artifacts WHERE id IN (SELECT id FROM doomed)
RETURNING size`

// ExpireArtifacts deletes up to limit artifacts expired at now.
func (s *Store) ExpireArtifacts(ctx context.Context, now time.Time, limit int) (int, int64, error) {
	rows, err := s.pool.Query(ctx, expireArtifacts, now, limit)
	if err != nil {
		return 0, 0, err
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, 0, err
	}
	var bytes int64
	for _, n := range sizes {
		bytes += n
	}
	return len(sizes), bytes, nil
}

const dueObjects = `
SELECT object_key FROM object_cleanup WHERE due_at <= $1
ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED`

const forgetObjects = `DELETE FROM object_cleanup WHERE object_key = ANY($1)`

// CleanObjects removes a batch of due objects: the rows stay locked while their objects
// are deleted, so no other replica takes them, and only the keys removed leave the list.
func (s *Store) CleanObjects(ctx context.Context, now time.Time, limit int, remove func(key string) error) (int, error) {
	var removed []string
	var firstErr error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		removed, firstErr = nil, nil
		rows, err := tx.Query(ctx, dueObjects, now, limit)
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := remove(k); err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("remove object %s: %w", k, err)
				}
				continue
			}
			removed = append(removed, k)
		}
		if len(removed) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, forgetObjects, removed)
		return err
	})
	if err != nil {
		return 0, err
	}
	return len(removed), firstErr
}

const artifactTotals = `SELECT count(*), COALESCE(sum(size), 0)::bigint FROM job_artifacts`

// ArtifactTotals counts the stored artifacts and their bytes.
func (s *Store) ArtifactTotals(ctx context.Context) (int64, int64, error) {
	var n, bytes int64
	err := s.pool.QueryRow(ctx, artifactTotals).Scan(&n, &bytes)
	return n, bytes, err
}
