package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// stuckCandidates reads unfinished pipelines whose recorded progress is older than the
// cutoff, through pipelines_unfinished_idx: the check costs what the candidates cost.
const stuckCandidates = `
SELECT id, project_id, stages, timeout_strategy, advanced_past FROM pipelines
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
  AND stage_idx = (SELECT min(stage_idx) FROM builds WHERE pipeline_id = $1 AND retried_by IS NULL
                   AND stage_idx > $2 AND status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling'))
ORDER BY id`

const moveOn = `UPDATE pipelines SET advanced_past = $2, progressed_at = $3 WHERE id = $1`

// HandleStuckStages finds pipelines whose current stage made no progress for p.Timeout and
// applies their strategy: pessimistic fails the stage's unfinished builds with
// stuck_or_timeout_failure (and so the pipeline); optimistic releases the next stage and
// leaves the stuck builds to the reapers.
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
		}
		rows, err := tx.Query(ctx, stuckCandidates, cutoff, p.Batch)
		if err != nil {
			return err
		}
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			err := row.Scan(&c.id, &c.projectID, &c.stages, &c.strategy, &c.advancedPast)
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
			stuck, queued, err := s.unstick(ctx, tx, c.id, c.projectID, c.stages, c.strategy, c.advancedPast, p.Now)
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
		for _, b := range waiting {
			if _, err := tx.Exec(ctx, addEvent, b.ID, builds.EventStuckStage, now, "", detail); err != nil {
				return nil, false, err
			}
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
