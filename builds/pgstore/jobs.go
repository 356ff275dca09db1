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

// A finish reads, with the lock, the pipeline's stage tally (pipelineShape's rows, for both
// kinds of pipeline) and, in a pipeline planned per job, what the job that ended can decide
// (see builds.PlanNeeders) instead of every latest attempt: the created jobs that need it
// and the latest attempts of what those need, through builds_pipeline_dag_idx. One
// statement, ordered by kind:
//
//	0  the tally: stage_idx, status, allow_failure, n (the count), left_behind (any)
//	1  the ended build (per job only): its stage_idx, its name, n = 1 when its needers are
//	   recorded (needed_by is NULL on builds created before the column)
//	2  a created needer: stage_idx, status, allow_failure, left_behind, id, name, run_when, needs, bridge
//	3  a job a needer needs: the same columns
const shapeAndNeedersOfBuild = `
WITH o AS (
    SELECT pipeline_id, name, stage_idx, needed_by FROM builds WHERE id = $1
), x AS (
    SELECT o.* FROM o JOIN pipelines p ON p.id = o.pipeline_id WHERE p.per_job
), c AS (
    SELECT b.id, b.name, b.stage_idx, b.status, b.allow_failure, b.run_when, b.needs, b.left_behind, b.bridge
    FROM builds b JOIN x ON b.pipeline_id = x.pipeline_id
    WHERE b.name = ANY(x.needed_by) AND b.retried_by IS NULL AND b.needs IS NOT NULL AND b.status = 'created'
)
SELECT 0, stage_idx, status, allow_failure, count(*)::int, bool_or(left_behind), 0::bigint, '', '', NULL::text[], false
FROM builds WHERE pipeline_id = (SELECT pipeline_id FROM o) AND retried_by IS NULL
GROUP BY stage_idx, status, allow_failure
UNION ALL
SELECT 1, x.stage_idx, '', false, (x.needed_by IS NOT NULL)::int, false, 0, x.name, '', NULL, false FROM x
UNION ALL
SELECT 2, c.stage_idx, c.status, c.allow_failure, 0, c.left_behind, c.id, c.name, c.run_when, c.needs, c.bridge FROM c
UNION ALL
SELECT 3, b.stage_idx, b.status, b.allow_failure, 0, b.left_behind, b.id, b.name, b.run_when, b.needs, b.bridge
FROM builds b JOIN x ON b.pipeline_id = x.pipeline_id
WHERE b.name = ANY(ARRAY(SELECT unnest(c.needs) FROM c)) AND b.retried_by IS NULL AND cardinality(b.needed_by) > 0
ORDER BY 1, 2`

// needers is what shapeAndNeedersOfBuild reads of the ended build's needers.
type needers struct {
	// known: the pipeline is planned per job and the ended build's needers are recorded.
	known bool
	stage int
	cands []builds.PlanJob
	needs map[string]builds.PlanJob
}

// readShapeAndNeeders reads shapeAndNeedersOfBuild's rows: the stage tally in stage order
// (as readShapeLeft), whether a build was left behind, and the needers.
func readShapeAndNeeders(rows pgx.Rows, err error) (stages []builds.StageTally, leftBehind bool, n needers, _ error) {
	n.needs = map[string]builds.PlanJob{}
	if err != nil {
		return nil, false, n, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, count int
		var j builds.PlanJob
		var status string
		if err := rows.Scan(&kind, &j.StageIdx, &status, &j.AllowFailure, &count, &j.LeftBehind, &j.ID, &j.Name, &j.When, &j.Needs, &j.Bridge); err != nil {
			return nil, false, n, err
		}
		j.Status, j.NeedsDeclared = builds.Status(status), j.Needs != nil
		switch kind {
		case 0:
			if len(stages) == 0 || stages[len(stages)-1].Idx != j.StageIdx {
				stages = append(stages, builds.StageTally{Idx: j.StageIdx})
			}
			stages[len(stages)-1].Add(j.Status, j.AllowFailure, count)
			leftBehind = leftBehind || j.LeftBehind
		case 1:
			n.stage, n.known = j.StageIdx, count == 1
		case 2:
			n.cands = append(n.cands, j)
		default:
			n.needs[j.Name] = j
		}
	}
	return stages, leftBehind, n, rows.Err()
}

// earlierUnfinished reports whether a job of stage idx or an earlier one is unfinished (an
// optional manual job counts as finished, as it does in the plan): then every job without
// needs after stage idx keeps waiting.
func earlierUnfinished(tally []builds.StageTally, idx int) bool {
	for _, t := range tally {
		if t.Idx <= idx && t.Created+t.Active+t.Manual+t.Scheduled > 0 {
			return true
		}
	}
	return false
}

// advanceNeeders is advanceJobs for a finish whose needers were read (readShapeAndNeeders): it
// decides only them (builds.PlanNeeders) and derives the status from the tally; ok is false
// when the whole plan must decide instead (needers unknown, a build left behind, the ended
// job's stage and the earlier ones all finished, or a move that decides further jobs).
func advanceNeeders(ctx context.Context, tx querier, pipelineID int64, now time.Time, p lockedPipeline, n needers) (queued, ok bool, err error) {
	if !n.known || p.leftBehind || !earlierUnfinished(p.stages, n.stage) {
		return false, false, nil
	}
	moves, ok := builds.PlanNeeders(n.cands, n.needs)
	if !ok {
		return false, false, nil
	}
	var moved builds.StageTally // the moves' changes to the tally, which PipelineStatus adds up
	if len(moves) > 0 {
		ids := map[builds.Status][]int64{}
		for _, m := range moves {
			c := n.cands[m.Index]
			ids[m.To] = append(ids[m.To], c.ID)
			moved.Add(builds.StatusCreated, c.AllowFailure, -1)
			moved.Add(m.To, c.AllowFailure, 1)
		}
		batch := &pgx.Batch{}
		for _, to := range []builds.Status{builds.StatusPending, builds.StatusManual, builds.StatusScheduled} {
			if len(ids[to]) > 0 {
				batch.Queue(moveStatements[to], ids[to], now)
			}
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return false, false, err
		}
		queued = len(ids[builds.StatusPending]) > 0
	}
	if p.resourceGroups {
		assigned, err := assignPipelineGroups(ctx, tx, pipelineID, now)
		if err != nil {
			return false, false, err
		}
		queued = queued || assigned
	}
	upstream, err := storeStatus(ctx, tx, pipelineID, now, p, builds.PipelineStatus(append(p.stages, moved)), len(moves) > 0)
	return queued || upstream, true, err
}
