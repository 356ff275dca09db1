package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// pendingBridges reads the bridge pass's queue through builds_bridges_idx. No lock: the
// pass compiles outside any transaction, and CreateChild's compare-and-set decides.
const pendingBridges = `
SELECT ` + buildCols + `, p.project_id, p.iid, p.source, p.before_sha, p.variables, p.depth, p.created_by
FROM builds b` + buildJoins + `
WHERE b.bridge AND b.status = 'pending'
ORDER BY b.queued_at, b.id
LIMIT $1`

// PendingBridges lists pending bridges, oldest first, with their pipelines.
func (s *Store) PendingBridges(ctx context.Context, limit int) ([]builds.PendingBridge, error) {
	rows, err := s.pool.Query(ctx, pendingBridges, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.PendingBridge, error) {
		var pb builds.PendingBridge
		var status string
		p := &pb.Pipeline
		dests := append(buildDests(&pb.Build, &status), &p.ProjectID, &p.IID, &p.Source, &p.BeforeSHA, &p.Variables, &p.Depth, &p.CreatedBy)
		err := row.Scan(dests...)
		pb.Build.Status = builds.Status(status)
		p.ID, p.Ref, p.SHA = pb.Build.PipelineID, pb.Build.Ref, pb.Build.SHA
		return pb, err
	})
}

// lockPendingBridge is CreateChild's compare-and-set: the bridge, pending, without a child
// yet. FOR UPDATE makes a second replica wait for the first one's commit and then find
// the bridge moved on (no row); the unique index on pipelines.parent_build_id would refuse
// a second child anyway.
const lockPendingBridge = `
SELECT b.pipeline_id, p.depth, COALESCE(b.payload -> 'trigger' ->> 'strategy', '')
FROM builds b JOIN pipelines p ON p.id = b.pipeline_id
WHERE b.id = $1 AND b.bridge AND b.status = 'pending'
  AND NOT EXISTS (SELECT 1 FROM pipelines c WHERE c.parent_build_id = b.id)
FOR UPDATE OF b`

const pipelineStatus = `SELECT status FROM pipelines WHERE id = $1`

// startBridge moves a bridge whose child was just created: it starts then, and a bridge
// that does not wait for its child ends then too.
const startBridge = `
WITH b AS (
    UPDATE builds SET status = $2, started_at = $3, updated_at = $3,
        finished_at = CASE WHEN $2 = 'running' THEN NULL ELSE $3::timestamptz END
    WHERE id = $1 AND status = 'pending'
    RETURNING *
), e AS (
    INSERT INTO build_events (build_id, type, at, detail)
    SELECT id, 'downstream_created', $3, jsonb_build_object('downstream_pipeline_id', $4::bigint) FROM b
)
SELECT ` + buildCols + ` FROM b` + buildJoins

// CreateChild stores the child of a pending bridge and moves the bridge on, or fails the
// bridge, in one transaction: a crash leaves either both or neither.
func (s *Store) CreateChild(ctx context.Context, c builds.ChildPipeline) (builds.ChildCreated, error) {
	var res builds.ChildCreated
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = builds.ChildCreated{}
		var parentID int64
		var depth int
		var strategy string
		if err := tx.QueryRow(ctx, lockPendingBridge, c.BridgeID).Scan(&parentID, &depth, &strategy); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return builds.ErrBridgeTaken
			}
			return err
		}
		def, reason, message := c.Definition, c.Reason, c.Message
		if def != nil && depth >= builds.MaxPipelineDepth {
			def, reason = nil, builds.ReasonMaxDescendantsDepth
			message = fmt.Sprintf("child pipelines nest at most %d levels deep", builds.MaxPipelineDepth)
		}
		if def == nil {
			if reason == "" {
				reason = builds.ReasonDownstreamCreationFailed
			}
			f, err := finishTx(ctx, tx, builds.Finish{BuildID: c.BridgeID, From: []builds.Status{builds.StatusPending},
				To: builds.StatusFailed, Reason: reason, Event: builds.EventDownstreamFailed,
				Detail: map[string]any{"message": message}, Now: c.Now})
			res.Bridge, res.Queued = f.Build, f.Queued
			return err
		}
		d := *def
		d.ParentBuildID = c.BridgeID
		childID, err := insertPipelineTx(ctx, tx, d, c.Now, depth+1)
		if err != nil {
			return err
		}
		res.ChildID = childID
		to := builds.StatusSuccess
		if strategy == builds.StrategyDepend {
			to = builds.StatusRunning
		}
		if err := builds.CheckTransition(builds.StatusPending, to, builds.EventDownstreamCreated, ""); err != nil {
			return err
		}
		if res.Bridge, err = scanBuild(tx.QueryRow(ctx, startBridge, c.BridgeID, string(to), c.Now, childID)); err != nil {
			return err
		}
		if _, err := advance(ctx, tx, parentID, c.Now); err != nil {
			return err
		}
		res.Queued = true // the child's first jobs
		if to != builds.StatusRunning {
			return nil
		}
		// A child that ended as it was created (every job ruled out at once) ends its
		// bridge now: its own status write came before the bridge followed it.
		var childStatus string
		if err := tx.QueryRow(ctx, pipelineStatus, childID).Scan(&childStatus); err != nil {
			return err
		}
		if pipelineEnded(childStatus) {
			if _, err := followDownstream(ctx, tx, childID, c.BridgeID, childStatus, c.Now); err != nil {
				return err
			}
			res.Bridge.Status = builds.StatusSuccess
			if childStatus != builds.PipelineSuccess {
				res.Bridge.Status = builds.StatusFailed
			}
		}
		return nil
	})
	return res, err
}

func pipelineEnded(status string) bool {
	return status == builds.PipelineSuccess || status == builds.PipelineFailed || status == builds.PipelineCanceled
}

// lockBridge reads a bridge that a child's end may move on.
const lockBridge = `
SELECT status, COALESCE(payload -> 'trigger' ->> 'strategy', '') FROM builds
WHERE id = $1 AND bridge FOR UPDATE`

// followDownstream ends a depend bridge as its child pipeline childID ended (GitLab's
// inherit_status_from_downstream: success, canceled, else failed), and advances the
// bridge's pipeline, in the transaction that ended the child. A bridge that is not
// running (it ended, or it does not depend) is left alone; one whose cancel was requested
// becomes canceled whatever the child's end.
func followDownstream(ctx context.Context, tx querier, childID, bridgeID int64, childStatus string, now time.Time) (queued bool, err error) {
	var status, strategy string
	if err := tx.QueryRow(ctx, lockBridge, bridgeID).Scan(&status, &strategy); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return false, err
	}
	from := builds.Status(status)
	if strategy != builds.StrategyDepend || (from != builds.StatusRunning && from != builds.StatusCanceling) {
		return false, nil
	}
	f := builds.Finish{BuildID: bridgeID, From: []builds.Status{from}, Event: builds.EventDownstreamFinished, Now: now,
		Detail: map[string]any{"downstream_pipeline_id": childID, "downstream_status": childStatus}}
	switch {
	case from == builds.StatusCanceling || childStatus == builds.PipelineCanceled:
		f.To = builds.StatusCanceled
	case childStatus == builds.PipelineSuccess:
		f.To = builds.StatusSuccess
	default:
		f.To, f.Reason = builds.StatusFailed, builds.ReasonUnknownFailure
	}
	res, err := finishTx(ctx, tx, f)
	return res.Queued, err
}

// bridgesOfPipeline lists a pipeline's bridges (every attempt) with their children.
const bridgesOfPipeline = `
SELECT ` + buildCols + `, COALESCE(c.id, 0), COALESCE(c.iid, 0), COALESCE(c.ref, ''), COALESCE(c.sha, ''),
    COALESCE(c.status, ''), COALESCE(c.source, ''), COALESCE(c.created_at, b.created_at), COALESCE(c.updated_at, b.updated_at)
FROM builds b` + buildJoins + `LEFT JOIN pipelines c ON c.parent_build_id = b.id
WHERE b.pipeline_id = $1 AND p.project_id = $2 AND b.bridge
ORDER BY b.stage_idx, b.id`

// Bridges lists the bridge builds of a pipeline with their children.
func (s *Store) Bridges(ctx context.Context, projectID, pipelineID int64) ([]builds.BridgeView, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT true FROM pipelines WHERE id = $1 AND project_id = $2`, pipelineID, projectID).Scan(&exists); err != nil {
		return nil, notFound(err, fmt.Sprintf("pipeline %d", pipelineID))
	}
	rows, err := s.pool.Query(ctx, bridgesOfPipeline, pipelineID, projectID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.BridgeView, error) {
		var v builds.BridgeView
		var status string
		var d builds.DownstreamPipeline
		dests := append(buildDests(&v.Build, &status), &d.ID, &d.IID, &d.Ref, &d.SHA, &d.Status, &d.Source, &d.CreatedAt, &d.UpdatedAt)
		err := row.Scan(dests...)
		v.Build.Status = builds.Status(status)
		if d.ID != 0 {
			d.ProjectID = v.Build.ProjectID
			v.Downstream = &d
		}
		return v, err
	})
}
