package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// playBuild moves a manual build to pending, with its event and who played it.
const playBuild = `
WITH b AS (
    UPDATE builds SET status = ` + queuedStatus + `, queued_at = $2, updated_at = $2
    WHERE id = $1 AND status = 'manual'
    RETURNING *
), e AS (
    INSERT INTO build_events (build_id, type, at, detail)
    SELECT id, 'played', $2, jsonb_build_object('actor', $3::text) FROM b
)
SELECT ` + buildCols + ` FROM b` + buildJoins

// PlayBuild queues a manual build (POST …/jobs/:id/play): it becomes pending, the builds
// skipped because it had not run get another chance (GitLab's ResetSkippedJobsService), and
// its pipeline advances, in one transaction. ErrConflict when the build is not manual.
func (s *Store) PlayBuild(ctx context.Context, id int64, now time.Time, actor string) (builds.Build, error) {
	var played builds.Build
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The build's row first, then (reopenAfter) its pipeline's, as Finish takes them.
		b, err := scanBuild(tx.QueryRow(ctx, playBuild, id, now, actor))
		if errors.Is(err, pgx.ErrNoRows) {
			return builds.ErrConflict
		}
		if err != nil {
			return fmt.Errorf("play build %d: %w", id, err)
		}
		if err := reopenAfter(ctx, tx, b.ID, b.PipelineID, b.StageIdx, now); err != nil {
			return err
		}
		played = b
		_, err = advance(ctx, tx, b.PipelineID, now)
		return err
	})
	return played, err
}
