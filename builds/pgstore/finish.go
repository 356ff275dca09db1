package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// finishBuild also decides allow_failure: exit_codes (GitLab's allow_failure: {exit_codes}):
// a failure whose exit code the job lists is allowed, and the build's allow_failure says so
// from then on for the stage tally, the job plan and the pipeline's status. The payload is
// read only for a failure with an exit code (AND evaluates left to right and stops early).
//
// With $14, the ack sweeper's time, only a build whose deadline of record has passed
// changes: Postgres's deadline is the arbiter between a timeout and a keep-alive.
//
// With a flush ($12 the offset, $13 the bytes; NULL without), the same UPDATE stores the
// live log's last bytes with flushTrace's compare-and-set on trace_size: one statement and
// one commit fewer than a flush of its own, and no second UPDATE of the row in the
// transaction (see builds.Finish.Flush). The chunk goes in when the stored size was the
// offset. When it had already passed the offset to the flush's end, a flush or append
// made meanwhile stored these bytes, its chunk starting at the offset (the stored size
// only grows by a chunk at the stored size): the conflict leaves that chunk alone.
const finishBuild = `
WITH b AS (
    UPDATE builds SET status = $3, failure_reason = NULLIF($4, ''), exit_code = $5,
        runner_final_state = NULLIF($6, ''), finished_at = $7, updated_at = $7,
        ack_deadline = NULL, cancel_requested = false,
        allow_failure = allow_failure OR ($3 = 'failed' AND $5::bigint IS NOT NULL
            AND COALESCE(payload -> 'allow_failure_exit_codes' @> to_jsonb($5::bigint), false)),
        trace_size = CASE WHEN trace_size = $12::bigint THEN trace_size + length($13::bytea) ELSE trace_size END
    WHERE id = $1 AND status = ANY($2::text[]) AND ($11::bytea IS NULL OR token_hash = $11)
      AND ($14::timestamptz IS NULL OR ack_deadline <= $14)
    RETURNING *
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT id, $8, $7,
           CASE WHEN $11::bytea IS NULL THEN $9
                ELSE COALESCE((SELECT m.system_id FROM runner_managers m WHERE m.id = b.runner_manager_id), '') END,
           $10::jsonb || jsonb_strip_nulls(jsonb_build_object('status', $3::text,
               'failure_reason', NULLIF($4, ''), 'exit_code', $5::bigint))
    FROM b
), c AS (
    INSERT INTO build_trace_chunks (build_id, offset_at, data)
    SELECT id, $12, $13 FROM b WHERE length($13::bytea) > 0 AND b.trace_size = $12::bigint + length($13::bytea)
    ON CONFLICT (build_id, offset_at) DO NOTHING
)
SELECT ` + buildCols + ` FROM b` + buildJoins

// pipelineOfBuild is the pipeline of build $1: lockPipelineOfBuild selects by it, so that
// Finish can send it with the build's own change.
const pipelineOfBuild = `(SELECT pipeline_id FROM builds WHERE id = $1)`

// Finish moves a build to an end state, retries it if the policy allows, and advances its
// pipeline, all in one transaction. ErrConflict when the build is not in f.From.
//
// Two round trips: BEGIN, the build's change, the pipeline's lock and the read of its
// stages (and, planned per job, of the build's needers) go together (each statement still
// starts after the one before it ends, so the read sees what the previous lock holder
// committed); the pipeline's new status, when it has one, goes with the COMMIT.
func (s *Store) Finish(ctx context.Context, f builds.Finish) (builds.Finished, error) {
	var res builds.Finished
	if err := f.Check(); err != nil {
		return res, err
	}
	err := s.inPipeTx(ctx, func(tx *pipeTx) error {
		batch := &pgx.Batch{}
		batch.Queue(finishBuild, finishArgs(f)...)
		batch.Queue(lockPipelineOfBuild, f.BuildID)
		batch.Queue(shapeAndNeedersOfBuild, f.BuildID)
		br := tx.SendBatch(ctx, batch)
		b, err := scanBuild(br.QueryRow())
		if errors.Is(err, pgx.ErrNoRows) {
			err = builds.ErrConflict
		}
		var p lockedPipeline
		var n needers
		if err == nil {
			p, err = readLockRow(br)
		}
		if err == nil {
			p.stages, p.leftBehind, n, err = readShapeAndNeeders(br.Query())
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if res, err = afterFinish(ctx, tx, f, b); err != nil {
			return err
		}
		// GitLab leaves a pipeline alone when the failure was allowed, and a retried job has
		// not failed for good.
		res.CancelPipeline = p.cancelOnFailure && b.Status == builds.StatusFailed && !b.AllowFailure && res.Retry == nil
		if res.Retry != nil && !p.perJob {
			// The retry joined the stage: the shape read with the lock is out of date.
			if p.stages, err = shape(ctx, tx, b.PipelineID); err != nil {
				return err
			}
		}
		if p.perJob && res.Retry == nil {
			// The job ended for good: only its needers can change (advanceNeeders).
			queued, ok, err := advanceNeeders(ctx, tx, b.PipelineID, f.Now, p, n)
			if err != nil || ok {
				res.Queued = res.Queued || queued
				return err
			}
		}
		queued, err := advanceLocked(ctx, tx, b.PipelineID, f.Now, p)
		res.Queued = res.Queued || queued
		return err
	})
	return res, err
}

func finishTx(ctx context.Context, tx querier, f builds.Finish) (builds.Finished, error) {
	res, err := finishBuildTx(ctx, tx, f)
	if err != nil {
		return builds.Finished{}, err
	}
	queued, err := advance(ctx, tx, res.Build.PipelineID, f.Now)
	if err != nil {
		return builds.Finished{}, err
	}
	res.Queued = res.Queued || queued
	return res, nil
}

func finishArgs(f builds.Finish) []any {
	from := make([]string, len(f.From))
	for i, st := range f.From {
		from[i] = string(st)
	}
	detail := f.Detail
	if detail == nil {
		detail = map[string]any{}
	}
	var offset *int64
	var data []byte
	if f.Flush != nil {
		offset, data = &f.Flush.Offset, f.Flush.Data
	}
	var ackBy *time.Time
	if !f.AckDeadlineBy.IsZero() {
		ackBy = &f.AckDeadlineBy
	}
	return []any{f.BuildID, from, string(f.To), f.Reason, f.ExitCode,
		f.RunnerFinalState, f.Now, f.Event, f.RunnerManager, detail, f.TokenHash, offset, data, ackBy}
}

// finishBuildTx is finishTx without advancing the pipeline: for a caller that finishes
// several builds of one pipeline in a transaction and advances it once, after the last.
func finishBuildTx(ctx context.Context, tx querier, f builds.Finish) (builds.Finished, error) {
	if err := f.Check(); err != nil {
		return builds.Finished{}, err
	}
	b, err := scanBuild(tx.QueryRow(ctx, finishBuild, finishArgs(f)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.Finished{}, builds.ErrConflict
	}
	if err != nil {
		return builds.Finished{}, err
	}
	return afterFinish(ctx, tx, f, b)
}

// afterFinish applies the retry policy to build b, which f just finished.
func afterFinish(ctx context.Context, tx querier, f builds.Finish, b builds.Build) (builds.Finished, error) {
	if f.TokenHash != nil {
		f.RunnerManager = b.RunnerSystemID // the statement derived it too
	}
	res := builds.Finished{Build: b}
	if err := finishEnvironment(ctx, tx, b, f.To, f.Now); err != nil {
		return builds.Finished{}, err
	}
	d := builds.DecideAutoRetry(f, b)
	switch {
	case d.Retry:
		retry, err := createRetry(ctx, tx, b.ID, f.Now, f.Reason, "auto", false)
		if err != nil {
			return builds.Finished{}, err
		}
		res.Retry, res.Queued = &retry, true
		res.Build.RetriedBy = retry.ID
	case d.Exhausted:
		if err := addEventTx(ctx, tx, builds.Event{BuildID: b.ID, Type: builds.EventRetryExhausted, At: f.Now,
			RunnerManager: f.RunnerManager, Detail: map[string]any{"reason": f.Reason, "attempts": b.Attempt, "limit": d.Limit}}); err != nil {
			return builds.Finished{}, err
		}
	}
	return res, nil
}

// createRetry copies a build into a new pending attempt (a retry runs at once, whatever its
// when, as GitLab enqueues retries immediately): insertRetry. insertHeldRetry makes it a
// created one instead, which waits for its predecessors as a new pipeline's would (a
// pipeline retry's job of a stage not reached yet, or of a needs pipeline). retry_of is
// UNIQUE, so a second retry of the same build fails instead of duplicating it. allow_failure comes from the definition
// when the job lists exit codes: the failed attempt's may have been set by its exit code.
// Only an ended build is retried (r), the states in which the table declares its retried
// event: otherwise nothing is inserted and the caller gets no row.
const (
	insertRetry     = retryHead + queuedStatus + retryQueuedAt + `$2` + retryBody + queuedRetryEvent + retryTail
	insertHeldRetry = retryHead + `'created'` + retryQueuedAt + `NULL` + retryBody + `'created'` + retryTail
)

const (
	retryHead = `
WITH r AS (
    SELECT id FROM builds WHERE id = $1 AND status IN ('success', 'failed', 'canceled')
), n AS (
    INSERT INTO builds (project_id, pipeline_id, stage, stage_idx, name, status, tags, payload,
                        timeout_seconds, allow_failure, run_when, needs, needed_by, attempt, retry_of, queued_at, created_at, updated_at,
                        resource_group_id, bridge, protected)
    SELECT project_id, pipeline_id, stage, stage_idx, name, `
	retryQueuedAt = `, tags, payload, timeout_seconds,
           CASE WHEN payload ? 'allow_failure_exit_codes' THEN COALESCE((payload ->> 'allow_failure')::boolean, false)
                ELSE allow_failure END,
           run_when, needs, needed_by, attempt + 1, id, `
	retryBody = `, $2, $2, resource_group_id, bridge, protected
    FROM builds WHERE id = (SELECT id FROM r)
    RETURNING *
), o AS (
    UPDATE builds SET retried_by = (SELECT id FROM n) WHERE id = $1
), d AS (
    -- A retried deploy job deploys again: a deployment of its own (migration 000020).
    INSERT INTO deployments (project_id, environment_id, build_id, ref, sha, created_at)
    SELECT od.project_id, od.environment_id, n.id, od.ref, od.sha, $2 FROM n JOIN deployments od ON od.build_id = $1
), e AS (
    INSERT INTO build_events (build_id, type, at, detail)
    SELECT $1, 'retried', $2, jsonb_build_object('new_id', n.id, 'reason', $3::text, 'actor', $4::text) FROM n
    UNION ALL
    SELECT n.id, `
	queuedRetryEvent = `CASE n.status WHEN 'pending' THEN 'queued' ELSE 'waiting_for_resource' END`
	retryTail        = `, $2,
           jsonb_build_object('retry_of', $1::bigint, 'attempt', n.attempt) FROM n
)
SELECT ` + buildCols + ` FROM n b` + buildJoins
)

// lockPipelineOf takes the pipeline row lock before the retry's INSERT. The INSERT's
// foreign-key check takes KEY SHARE on the pipeline row; upgrading that to advance's
// FOR UPDATE afterwards deadlocks against any other transaction doing the same in the
// pipeline (two sweepers, a sweep and a decline, two declines).
const lockPipelineOf = `SELECT p.id FROM pipelines p JOIN builds b ON b.pipeline_id = p.id WHERE b.id = $1 FOR UPDATE OF p`

func createRetry(ctx context.Context, tx querier, id int64, now time.Time, reason, actor string, held bool) (builds.Build, error) {
	// Both statements in one round trip (a pipelined batch): they still run in order, the
	// lock granted before the INSERT starts.
	batch := &pgx.Batch{}
	batch.Queue(lockPipelineOf, id)
	insert := insertRetry
	if held {
		insert = insertHeldRetry
	}
	batch.Queue(insert, id, now, reason, actor)
	br := tx.SendBatch(ctx, batch)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return builds.Build{}, err
	}
	b, err := scanBuild(br.QueryRow())
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return b, err
}

const lockBuild = `SELECT status, retried_by IS NULL, pipeline_id, stage_idx FROM builds WHERE id = $1 FOR UPDATE`

// RetryBuild creates a new attempt of a finished build that has not been retried yet.
func (s *Store) RetryBuild(ctx context.Context, id int64, now time.Time, actor string) (builds.Build, error) {
	var retry builds.Build
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var status string
		var latest bool
		var pipelineID int64
		var stageIdx int
		if err := tx.QueryRow(ctx, lockBuild, id).Scan(&status, &latest, &pipelineID, &stageIdx); err != nil {
			return notFound(err, "build")
		}
		if !builds.Retryable(builds.Status(status), latest) {
			return builds.ErrNotRetryable
		}
		// What was skipped because of this build gets another chance.
		if err := reopenAfter(ctx, tx, id, pipelineID, stageIdx, now); err != nil {
			return err
		}
		var err error
		if retry, err = createRetry(ctx, tx, id, now, "operator", actor, false); err != nil {
			return err
		}
		_, err = advance(ctx, tx, pipelineID, now)
		return err
	})
	return retry, err
}

// pipelineShape counts a pipeline's latest attempts by stage and state; lockPipeline locks
// the pipeline row and reads what advance needs. Each has a twin that finds the pipeline
// from build $1 instead (see Finish): lockPipelineOfBuild, and shapeAndNeedersOfBuild,
// which counts a pipeline planned per job too (a finish there derives the status from it
// and decides only the ended job's needers, advanceNeeders).
const (
	pipelineShape       = pipelineShapeHead + `$1` + pipelineShapeTail + `$1` + pipelineShapeEnd
	lockPipeline        = lockPipelineHead + `$1` + forUpdate
	lockPipelineOfBuild = lockPipelineHead + pipelineOfBuild + forUpdate
)

const (
	pipelineShapeHead = `
SELECT stage_idx, status, allow_failure, count(*)::int, bool_or(left_behind) FROM builds
WHERE pipeline_id = `
	// A pipeline planned per job reads its builds itself (advanceJobs): the count by id,
	// sent with the lock before per_job is known, is skipped for it (a one-time filter).
	pipelineShapeTail = ` AND retried_by IS NULL
  AND NOT (SELECT per_job FROM pipelines WHERE id = `
	pipelineShapeEnd = `)
GROUP BY stage_idx, status, allow_failure
ORDER BY stage_idx`
	lockPipelineHead = `SELECT status, advanced_past, progressed_at, per_job, resource_groups, COALESCE(parent_build_id, 0),
    auto_cancel_on_job_failure = 'all' FROM pipelines WHERE id = `
	forUpdate = ` FOR UPDATE`
)

// releaseStage queues a stage's builds: pending, or waiting_for_resource for those of a
// resource group (queuedStatus).
const releaseStage = `
WITH b AS (
    UPDATE builds SET status = ` + queuedStatus + `, queued_at = $3, updated_at = $3
    WHERE pipeline_id = $1 AND stage_idx = $2 AND status = 'created'
    RETURNING id, resource_group_id
)
INSERT INTO build_events (build_id, type, at, detail) SELECT id, ` + queuedEvent + `, $3, '{}'::jsonb FROM b`

const skipLaterStages = `
WITH b AS (
    UPDATE builds SET status = 'skipped', finished_at = $3, updated_at = $3
    WHERE pipeline_id = $1 AND stage_idx >= $2 AND status = 'created'
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail) SELECT id, 'skipped', $3, '{}'::jsonb FROM b`

// setPipelineStatus also records progress: advance runs whenever a build of the pipeline
// changed state, and the stuck-stage check reads progressed_at.
const setPipelineStatus = `
UPDATE pipelines SET status = $2, updated_at = $3, progressed_at = $3,
    finished_at = CASE WHEN $4 THEN $3::timestamptz END
WHERE id = $1`

// progressResolution is how stale pipelines.progressed_at may be while builds keep
// changing: the stuck-stage check compares it against hours.
const progressResolution = time.Second

// advance applies SPEC §6 to a pipeline after one of its builds changed: release the next
// stage when every latest attempt of the current one is finished (success, or failed with
// allow_failure), skip what follows a blocking failure, and store the derived status. It
// locks the pipeline row, so concurrent finishes of one pipeline advance it one at a time.
func advance(ctx context.Context, tx querier, pipelineID int64, now time.Time) (queued bool, err error) {
	// The lock and the read of the stages in one round trip (a pipelined batch): the read
	// still starts after the lock is granted, with a snapshot of its own that sees what the
	// previous holder committed, and the pipeline stays locked one round trip less.
	batch := &pgx.Batch{}
	batch.Queue(lockPipeline, pipelineID)
	batch.Queue(pipelineShape, pipelineID)
	br := tx.SendBatch(ctx, batch)
	p, err := readLocked(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	return advanceLocked(ctx, tx, pipelineID, now, p)
}

// lockedPipeline is what lockPipeline and then pipelineShape read.
type lockedPipeline struct {
	status       string
	advancedPast int
	progressedAt time.Time
	// perJob: the pipeline advances job by job (advanceJobs); stages is then unused.
	perJob bool
	// resourceGroups: some build of the pipeline has a resource_group; advance then
	// assigns its groups (assignPipelineGroups).
	resourceGroups bool
	stages         []builds.StageTally
	// leftBehind: some latest attempt counted in stages was left behind by the stuck check.
	leftBehind bool
	// parentBuild: the bridge that created this child pipeline (0: none); its end is the
	// bridge's (followDownstream).
	parentBuild int64
	// cancelOnFailure: workflow:auto_cancel:on_job_failure: all.
	cancelOnFailure bool
}

// readLocked reads the answers of lockPipeline and pipelineShape, the next two of br.
func readLocked(br pgx.BatchResults) (lockedPipeline, error) {
	p, err := readLockRow(br)
	if err == nil {
		p.stages, p.leftBehind, err = readShapeLeft(br.Query())
	}
	return p, err
}

// readLockRow reads the answer of lockPipeline (or lockPipelineOfBuild), the next of br.
func readLockRow(br pgx.BatchResults) (lockedPipeline, error) {
	var p lockedPipeline
	err := br.QueryRow().Scan(&p.status, &p.advancedPast, &p.progressedAt, &p.perJob, &p.resourceGroups, &p.parentBuild, &p.cancelOnFailure)
	return p, err
}

// advanceLocked carries out builds.PlanAdvance once the pipeline is locked and its shape
// read, and stores the status builds.PipelineStatus derives. A pipeline planned per job
// goes to advanceJobs instead.
func advanceLocked(ctx context.Context, tx querier, pipelineID int64, now time.Time, p lockedPipeline) (queued bool, err error) {
	if p.perJob {
		return advanceJobs(ctx, tx, pipelineID, now, p)
	}
	plan := builds.PlanAdvance(p.stages, p.advancedPast)
	changed := false
	switch {
	case plan.SkipFrom != builds.NoStage:
		tag, err := tx.Exec(ctx, skipLaterStages, pipelineID, plan.SkipFrom, now)
		if err != nil {
			return false, err
		}
		changed = tag.RowsAffected() > 0
	case plan.Release != builds.NoStage:
		if _, err := tx.Exec(ctx, releaseStage, pipelineID, plan.Release, now); err != nil {
			return false, err
		}
		queued, changed = true, true
	}
	stages := p.stages
	if changed {
		if stages, err = shape(ctx, tx, pipelineID); err != nil {
			return false, err
		}
	}
	if p.resourceGroups {
		// Before the status: storeStatus's statement travels with the COMMIT. A build
		// the group goes to stays active, so the status derived above still holds.
		assigned, err := assignPipelineGroups(ctx, tx, pipelineID, now)
		if err != nil {
			return false, err
		}
		queued = queued || assigned
	}
	upstream, err := storeStatus(ctx, tx, pipelineID, now, p, builds.PipelineStatus(stages), changed)
	return queued || upstream, err
}

// storeStatus records the pipeline's derived status, unless it stands and progress was
// recorded a moment ago. A child pipeline that ends moves its depend bridge and advances
// the parent pipeline in the same transaction; upstream reports whether that queued builds
// there.
func storeStatus(ctx context.Context, tx querier, pipelineID int64, now time.Time, p lockedPipeline, status string, changed bool) (upstream bool, err error) {
	if status == p.status && !changed && now.Sub(p.progressedAt) < progressResolution {
		// Nothing to store: the status stands and progress was recorded a moment ago.
		// Most finishes in a busy pipeline end here, one write and one WAL record fewer.
		return false, nil
	}
	if err := builds.CheckPipelineTransition(p.status, status); err != nil {
		return false, err
	}
	finished := pipelineEnded(status)
	if finished && p.parentBuild != 0 && status != p.status {
		if upstream, err = followDownstream(ctx, tx, pipelineID, p.parentBuild, status, now); err != nil {
			return false, err
		}
	}
	// The last statement of the transaction: it travels with the COMMIT.
	return upstream, execLast(ctx, tx, setPipelineStatus, pipelineID, status, now, finished)
}

func shape(ctx context.Context, tx querier, pipelineID int64) ([]builds.StageTally, error) {
	stages, _, err := readShapeLeft(tx.Query(ctx, pipelineShape, pipelineID))
	return stages, err
}

// readShapeLeft reads pipelineShape's rows (in stage order) into one tally per stage, and
// whether any of them was left behind.
func readShapeLeft(rows pgx.Rows, err error) (stages []builds.StageTally, leftBehind bool, _ error) {
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var idx, n int
		var status string
		var allowFailure, left bool
		if err := rows.Scan(&idx, &status, &allowFailure, &n, &left); err != nil {
			return nil, false, err
		}
		if len(stages) == 0 || stages[len(stages)-1].Idx != idx {
			stages = append(stages, builds.StageTally{Idx: idx})
		}
		stages[len(stages)-1].Add(builds.Status(status), allowFailure, n)
		leftBehind = leftBehind || left
	}
	return stages, leftBehind, rows.Err()
}
