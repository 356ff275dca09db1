package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// Pipelines planned per job (pipelines.per_job: some job has needs or a when other than
// on_success) advance by builds.PlanJobs over their latest attempts instead of the stage
// tally. The pipeline row lock serialises their advances as it does the stage path's, so
// two finishes of a job's last needs release it once.

// jobsOfPipeline reads what builds.PlanJobs needs of every latest attempt (columns only:
// the payload stays untouched).
const jobsOfPipeline = `
SELECT id, name, stage_idx, status, allow_failure, run_when, needs, left_behind, bridge FROM builds
WHERE pipeline_id = $1 AND retried_by IS NULL`

func readJobs(ctx context.Context, tx querier, pipelineID int64) ([]builds.PlanJob, error) {
	rows, err := tx.Query(ctx, jobsOfPipeline, pipelineID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.PlanJob, error) {
		var j builds.PlanJob
		var status string
		err := row.Scan(&j.ID, &j.Name, &j.StageIdx, &status, &j.AllowFailure, &j.When, &j.Needs, &j.LeftBehind, &j.Bridge)
		j.Status, j.NeedsDeclared = builds.Status(status), j.Needs != nil
		return j, err
	})
}

// The plan's moves, one statement per target state, each a compare-and-set on created.
const (
	releaseJobs = `
WITH b AS (
    UPDATE builds SET status = ` + queuedStatus + `, queued_at = $2, updated_at = $2
    WHERE id = ANY($1) AND status = 'created'
    RETURNING id, resource_group_id
)
INSERT INTO build_events (build_id, type, at, detail) SELECT id, ` + queuedEvent + `, $2, '{}'::jsonb FROM b`

	releaseManualJobs = `
WITH b AS (
    UPDATE builds SET status = 'manual', updated_at = $2
    WHERE id = ANY($1) AND status = 'created'
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail) SELECT id, 'manual', $2, '{}'::jsonb FROM b`

	// The time of record is in Postgres, so a delayed job survives any replica's restart.
	scheduleJobs = `
WITH b AS (
    UPDATE builds SET status = 'scheduled', updated_at = $2,
        scheduled_at = $2::timestamptz + make_interval(secs => COALESCE((payload ->> 'start_in_seconds')::int, 0))
    WHERE id = ANY($1) AND status = 'created'
    RETURNING id, scheduled_at
)
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, 'scheduled', $2, jsonb_build_object('scheduled_at', scheduled_at) FROM b`

	skipJobs = `
WITH b AS (
    UPDATE builds SET status = 'skipped', finished_at = $2, updated_at = $2
    WHERE id = ANY($1) AND status = 'created'
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail) SELECT id, 'skipped', $2, '{}'::jsonb FROM b`
)

// moveStatements maps a plan's target state to its statement.
var moveStatements = map[builds.Status]string{
	builds.StatusPending:   releaseJobs,
	builds.StatusManual:    releaseManualJobs,
	builds.StatusScheduled: scheduleJobs,
	builds.StatusSkipped:   skipJobs,
}

// advanceJobs is advanceLocked for a pipeline planned per job: read its latest attempts,
// carry out builds.PlanJobs in one round trip, and store the status derived from the
// result (known without reading it back).
func advanceJobs(ctx context.Context, tx querier, pipelineID int64, now time.Time, p lockedPipeline) (queued bool, err error) {
	jobs, err := readJobs(ctx, tx, pipelineID)
	if err != nil {
		return false, err
	}
	moves := builds.PlanJobs(jobs)
	if len(moves) > 0 {
		ids := map[builds.Status][]int64{}
		for _, m := range moves {
			ids[m.To] = append(ids[m.To], jobs[m.Index].ID)
		}
		batch := &pgx.Batch{}
		for _, to := range []builds.Status{builds.StatusPending, builds.StatusManual, builds.StatusScheduled, builds.StatusSkipped} {
			if len(ids[to]) > 0 {
				batch.Queue(moveStatements[to], ids[to], now)
			}
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return false, err
		}
		jobs = builds.ApplyMoves(jobs, moves)
		queued = len(ids[builds.StatusPending]) > 0
	}
	// A job released to pending may have gone to waiting_for_resource instead: both count
	// alike in the tally.
	status := builds.PipelineStatus(builds.TallyJobs(jobs))
	if p.resourceGroups {
		assigned, err := assignPipelineGroups(ctx, tx, pipelineID, now)
		if err != nil {
			return false, err
		}
		queued = queued || assigned
	}
	upstream, err := storeStatus(ctx, tx, pipelineID, now, p, status, len(moves) > 0)
	return queued || upstream, err
}

// reopenLaterStages: in a stage pipeline, the builds skipped after a stage come back when
// one of its builds is retried.
const reopenLaterStages = `
WITH b AS (
    UPDATE builds SET status = 'created', finished_at = NULL, updated_at = $3
    WHERE pipeline_id = $1 AND stage_idx > $2 AND status = 'skipped' AND retried_by IS NULL
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, 'reopened', $3, '{}'::jsonb FROM b`

// reopenJobs: in a pipeline planned per job, the skipped builds downstream of a retried or
// played one (builds.Downstream) come back; the next plan skips again those still ruled out.
const reopenJobs = `
WITH b AS (
    UPDATE builds SET status = 'created', finished_at = NULL, updated_at = $2
    WHERE id = ANY($1) AND status = 'skipped'
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, 'reopened', $2, '{}'::jsonb FROM b`

// lockPipelinePerJob locks the pipeline before reopenAfter reads its builds: no advance
// can skip one of them between the read and the reopen.
const lockPipelinePerJob = `SELECT per_job FROM pipelines WHERE id = $1 FOR UPDATE`

// reopenAfter gives the skipped builds that wait for build id (of pipelineID, in stage
// stageIdx) another chance, before a retry or a play of it. The caller holds the build's
// row lock; the pipeline's is taken here, in the order Finish takes them.
func reopenAfter(ctx context.Context, tx querier, id, pipelineID int64, stageIdx int, now time.Time) error {
	var perJob bool
	if err := tx.QueryRow(ctx, lockPipelinePerJob, pipelineID).Scan(&perJob); err != nil {
		return err
	}
	if !perJob {
		_, err := tx.Exec(ctx, reopenLaterStages, pipelineID, stageIdx, now)
		return err
	}
	jobs, err := readJobs(ctx, tx, pipelineID)
	if err != nil {
		return err
	}
	var ids []int64
	for i, j := range jobs {
		if j.ID != id {
			continue
		}
		for _, k := range builds.Downstream(jobs, i) {
			if jobs[k].Status == builds.StatusSkipped {
				ids = append(ids, jobs[k].ID)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, reopenJobs, ids, now)
	return err
}
