package pgstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// stuckCandidates reads unfinished pipelines whose recorded progress is older than the
// cutoff, through pipelines_unfinished_idx: the check costs what the candidates cost.
const stuckCandidates = `
SELECT id, project_id, stages, timeout_strategy, advanced_past, per_job FROM pipelines
WHERE status IN ('pending', 'running') AND progressed_at < $1
ORDER BY progressed_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

// lastProgress is when a build of the pipeline last changed state, from the builds' own
// timestamps (a liveness touch is not progress).
const lastProgress = `
SELECT max(GREATEST(created_at, queued_at, assigned_at, started_at, finished_at))
FROM builds WHERE pipeline_id = $1`

const markProgress = `UPDATE pipelines SET progressed_at = $2 WHERE id = $1`

// currentStage lists the unfinished latest attempts of the first stage past advanced_past
// that has any.
const currentStage = `
SELECT id, name, status, stage_idx FROM builds
WHERE pipeline_id = $1 AND retried_by IS NULL AND stage_idx > $2
  AND status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling')
  AND NOT (bridge AND status <> 'pending')
  AND stage_idx = (SELECT min(stage_idx) FROM builds WHERE pipeline_id = $1 AND retried_by IS NULL
                   AND stage_idx > $2 AND status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling')
                   AND NOT (bridge AND status <> 'pending'))
ORDER BY id`

const moveOn = `UPDATE pipelines SET advanced_past = $2, progressed_at = $3 WHERE id = $1`

// leaveBehind is moveOn for a pipeline planned per job: several stages run at once, so the
// builds themselves are marked, and builds.PlanJobs counts them as passed while unfinished.
const leaveBehind = `UPDATE builds SET left_behind = true WHERE id = ANY($1)`

// HandleStuckStages finds pipelines whose current stage made no progress for p.Timeout and
// applies their strategy: pessimistic fails the stage's unfinished builds with
// stuck_or_timeout_failure (and so the pipeline); optimistic releases the next stage and
// leaves the stuck builds to the reapers. Only pending and running pipelines are candidates:
// one blocked on a manual job or waiting for a delayed one's time is not stuck. In a
// pipeline planned per job the check waits for builds.WaitedFor: every build on its way to
// or on a runner, whatever its stage.
func (s *Store) HandleStuckStages(ctx context.Context, p builds.StuckParams) (builds.StuckResult, error) {
	var res builds.StuckResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = builds.StuckResult{}
		cutoff := p.Now.Add(-p.Timeout)
		type candidate struct {
			id, projectID int64
			stages        []string
			strategy      string
			advancedPast  int
			perJob        bool
		}
		rows, err := tx.Query(ctx, stuckCandidates, cutoff, p.Batch)
		if err != nil {
			return err
		}
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			err := row.Scan(&c.id, &c.projectID, &c.stages, &c.strategy, &c.advancedPast, &c.perJob)
			return c, err
		})
		if err != nil {
			return err
		}
		res.Checked = len(cands)
		for _, c := range cands {
			var last *time.Time
			if err := tx.QueryRow(ctx, lastProgress, c.id).Scan(&last); err != nil {
				return err
			}
			if last != nil && last.After(cutoff) {
				if _, err := tx.Exec(ctx, markProgress, c.id, *last); err != nil {
					return err
				}
				res.Progress++
				continue
			}
			unstick := s.unstick
			if c.perJob {
				unstick = s.unstickJobs
			}
			stuck, queued, err := unstick(ctx, tx, c.id, c.projectID, c.stages, c.strategy, c.advancedPast, p.Now)
			if err != nil {
				return err
			}
			res.Queued = res.Queued || queued
			if stuck != nil {
				res.Stuck = append(res.Stuck, *stuck)
			}
		}
		return nil
	})
	return res, err
}

func (s *Store) unstick(ctx context.Context, tx pgx.Tx, id, projectID int64, stages []string, strategy string,
	advancedPast int, now time.Time) (*builds.StuckPipeline, bool, error) {
	rows, err := tx.Query(ctx, currentStage, id, advancedPast)
	if err != nil {
		return nil, false, err
	}
	stageIdx := -1
	var waiting []builds.StuckBuild
	for rows.Next() {
		var b builds.StuckBuild
		var status string
		if err := rows.Scan(&b.ID, &b.Name, &status, &stageIdx); err != nil {
			rows.Close()
			return nil, false, err
		}
		b.Status = builds.Status(status)
		waiting = append(waiting, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(waiting) == 0 {
		// Nothing unfinished: a pipeline left without an end by an older version. advance
		// derives and stores its status.
		queued, err := advance(ctx, tx, id, now)
		return nil, queued, err
	}
	stage := ""
	if stageIdx >= 0 && stageIdx < len(stages) {
		stage = stages[stageIdx]
	}
	out := &builds.StuckPipeline{PipelineID: id, ProjectID: projectID, Stage: stage, Strategy: strategy, Builds: waiting}
	detail := map[string]any{"pipeline_id": id, "stage": stage, "strategy": strategy}
	plan := builds.PlanStuckStage(strategy, waiting, detail, now)
	if plan.MoveOn {
		if err := markStuck(ctx, tx, waiting, detail, now); err != nil {
			return nil, false, err
		}
		if _, err := tx.Exec(ctx, moveOn, id, stageIdx, now); err != nil {
			return nil, false, err
		}
		queued, err := advance(ctx, tx, id, now)
		return out, queued, err
	}
	queued := false
	for _, f := range plan.Finish {
		res, err := finishTx(ctx, tx, f)
		if err != nil {
			return nil, false, err
		}
		queued = queued || res.Queued
	}
	return out, queued, nil
}

// unstickJobs is unstick for a pipeline planned per job: it waits for builds.WaitedFor, in
// whatever stages they are; optimistic leaves them behind (leaveBehind) instead of a stage.
func (s *Store) unstickJobs(ctx context.Context, tx pgx.Tx, id, projectID int64, stages []string, strategy string,
	_ int, now time.Time) (*builds.StuckPipeline, bool, error) {
	jobs, err := readJobs(ctx, tx, id)
	if err != nil {
		return nil, false, err
	}
	idx := builds.WaitedFor(jobs)
	if len(idx) == 0 {
		// Nothing on its way to a runner: advance derives and stores the status.
		queued, err := advance(ctx, tx, id, now)
		return nil, queued, err
	}
	waiting := make([]builds.StuckBuild, len(idx))
	ids := make([]int64, len(idx))
	var stageIdx []int
	for n, i := range idx {
		j := jobs[i]
		waiting[n], ids[n] = builds.StuckBuild{ID: j.ID, Name: j.Name, Status: j.Status}, j.ID
		stageIdx = append(stageIdx, j.StageIdx)
	}
	slices.SortFunc(waiting, func(a, b builds.StuckBuild) int { return cmp.Compare(a.ID, b.ID) })
	// The stages it waits in, in pipeline order, for the log line and the events.
	slices.Sort(stageIdx)
	var names []string
	for _, k := range slices.Compact(stageIdx) {
		if k >= 0 && k < len(stages) {
			names = append(names, stages[k])
		}
	}
	stage := strings.Join(names, ", ")
	out := &builds.StuckPipeline{PipelineID: id, ProjectID: projectID, Stage: stage, Strategy: strategy, Builds: waiting}
	detail := map[string]any{"pipeline_id": id, "stage": stage, "strategy": strategy}
	plan := builds.PlanStuckStage(strategy, waiting, detail, now)
	if plan.MoveOn {
		if err := markStuck(ctx, tx, waiting, detail, now); err != nil {
			return nil, false, err
		}
		if _, err := tx.Exec(ctx, leaveBehind, ids); err != nil {
			return nil, false, err
		}
		if _, err := tx.Exec(ctx, markProgress, id, now); err != nil {
			return nil, false, err
		}
		queued, err := advance(ctx, tx, id, now)
		return out, queued, err
	}
	queued := false
	for _, f := range plan.Finish {
		res, err := finishBuildTx(ctx, tx, f)
		if err != nil {
			return nil, false, err
		}
		queued = queued || res.Queued
	}
	// One advance after the last, not one per build.
	q, err := advance(ctx, tx, id, now)
	return out, queued || q, err
}

// markStuckBuilds appends the stuck-stage event to the builds $1 still in a state the
// optimistic row of the table declares it for: one that ended meanwhile records none. No
// FOR SHARE here, unlike addEvent: this pass holds the pipeline row, and a finish locks its
// build before its pipeline, so waiting on the build's row could deadlock.
const markStuckBuilds = `
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, 'stuck_stage', $2::timestamptz, $3::jsonb FROM builds
WHERE id = ANY($1) AND status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling')
ORDER BY id`

// markStuck appends the stuck-stage event to each build the optimistic strategy leaves
// behind (the stage and the DAG form of the check alike).
func markStuck(ctx context.Context, tx pgx.Tx, waiting []builds.StuckBuild, detail map[string]any, now time.Time) error {
	ids := make([]int64, len(waiting))
	for i, b := range waiting {
		ids[i] = b.ID
	}
	_, err := tx.Exec(ctx, markStuckBuilds, ids, now, detail)
	return err
}
