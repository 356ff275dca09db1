package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
)

// insertPipeline numbers the pipeline in its project (pipeline_iids: the upsert's row lock
// holds a concurrent creation for the same project until this transaction ends, so no two
// share an iid) and stores it.
const insertPipeline = `
WITH n AS (
    INSERT INTO pipeline_iids AS c (project_id, last_iid) VALUES ($1, 1)
    ON CONFLICT (project_id) DO UPDATE SET last_iid = c.last_iid + 1
    RETURNING last_iid
)
INSERT INTO pipelines (project_id, ref, sha, stages, timeout_strategy, status, created_at, updated_at,
    iid, source, before_sha, variables, per_job, resource_groups, parent_build_id, depth,
    auto_cancel_on_new_commit, auto_cancel_on_job_failure, protected, created_by)
SELECT $1, $2, $3, $4, $5, 'pending', $6, $6, n.last_iid, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17 FROM n
RETURNING id`

// insertEvents records each new build's first event, the one its initial state calls for.
const insertEvents = `
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, CASE status WHEN 'pending' THEN 'queued' WHEN 'manual' THEN 'manual' WHEN 'scheduled' THEN 'scheduled'
                       WHEN 'skipped' THEN 'skipped' WHEN 'waiting_for_resource' THEN 'waiting_for_resource'
                       ELSE 'created' END, $2,
       CASE WHEN status = 'scheduled' THEN jsonb_build_object('scheduled_at', scheduled_at) ELSE '{}'::jsonb END
FROM builds WHERE pipeline_id = $1`

// initialEvents is insertEvents' choice, checked against the table before the rows go in.
var initialEvents = map[builds.Status]string{builds.StatusPending: builds.EventQueued, builds.StatusManual: builds.EventManual,
	builds.StatusScheduled: builds.EventScheduled, builds.StatusSkipped: builds.EventSkipped, builds.StatusCreated: builds.EventCreated,
	builds.StatusWaitingForResource: builds.EventWaitingForResource}

// CreatePipeline stores a normalized definition, each job in the state
// PipelineDefinition.InitialStatuses gives it (a stage pipeline: the first stage that has
// jobs pending, the rest created). Builds are inserted with COPY, so thousands of jobs cost
// one round trip.
func (s *Store) CreatePipeline(ctx context.Context, d builds.PipelineDefinition, now time.Time) (builds.Pipeline, error) {
	var id int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		id, err = insertPipelineTx(ctx, tx, d, now, 0)
		return err
	})
	if err != nil {
		return builds.Pipeline{}, err
	}
	return s.Pipeline(ctx, d.ProjectID, id)
}

// insertPipelineTx stores a normalized definition in tx (see CreatePipeline) at depth (a
// child's: its parent's + 1) and returns its id.
func insertPipelineTx(ctx context.Context, tx pgx.Tx, d builds.PipelineDefinition, now time.Time, depth int) (int64, error) {
	statuses := d.InitialStatuses()
	perJob := d.PerJob()
	var planned []builds.PlanJob // what the job plan reads: needs reduced to jobs of the pipeline
	if perJob {
		planned = d.PlanJobs()
		for i := range planned {
			planned[i].Status = statuses[i]
		}
	}
	for _, st := range statuses {
		if err := builds.CheckTransition(builds.StatusNew, st, initialEvents[st], ""); err != nil {
			return 0, err
		}
	}
	var parent *int64
	if d.ParentBuildID != 0 {
		parent = &d.ParentBuildID
	}
	// Protected or not is decided now and kept, on the pipeline and its builds.
	protected, err := refProtected(ctx, tx, d.ProjectID, d.Ref)
	if err != nil {
		return 0, err
	}
	var id int64
	keys := resourceGroupKeys(d.Jobs)
	if err := tx.QueryRow(ctx, insertPipeline, d.ProjectID, d.Ref, d.SHA, d.Stages, d.TimeoutStrategy, now,
		d.Source, d.BeforeSHA, nonNilVariables(d.Variables), perJob, len(keys) > 0, parent, depth,
		d.AutoCancel.OnNewCommit, d.AutoCancel.OnJobFailure, protected, d.CreatedBy).Scan(&id); err != nil {
		return 0, err
	}
	groups, err := ensureResourceGroups(ctx, tx, d.ProjectID, keys, now)
	if err != nil {
		return 0, err
	}
	var neededBy [][]string // each job's needers (builds.NeededBy); none in a stage pipeline
	if perJob {
		neededBy = builds.NeededBy(planned)
	}
	rows := make([][]any, len(d.Jobs))
	for i, j := range d.Jobs {
		status := statuses[i]
		var queuedAt, scheduledAt, finishedAt *time.Time
		switch status {
		case builds.StatusPending, builds.StatusWaitingForResource:
			queuedAt = &now
		case builds.StatusScheduled:
			at := now.Add(time.Duration(j.StartInSeconds) * time.Second)
			scheduledAt = &at
		case builds.StatusSkipped:
			finishedAt = &now
		}
		tags := j.Tags
		if tags == nil {
			tags = []string{}
		}
		when := j.When
		if when == "" {
			when = builds.WhenOnSuccess
		}
		var needs []string // NULL: stage order
		if perJob && j.NeedsDeclared {
			needs = planned[i].Needs
		}
		needed := []string{}
		if perJob {
			needed = neededBy[i]
		}
		payload := builds.PayloadOf(j)
		var group *int64 // NULL without a resource_group
		if gid, ok := groups[j.ResourceGroup]; ok {
			group = &gid
		}
		rows[i] = []any{d.ProjectID, id, j.Stage, d.StageIndex(j.Stage), j.Name, string(status), tags, payload,
			j.TimeoutSeconds, j.AllowFailure, when, needs, needed, queuedAt, scheduledAt, finishedAt, now, now, group, j.IsBridge(), protected}
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"builds"},
		[]string{"project_id", "pipeline_id", "stage", "stage_idx", "name", "status", "tags", "payload",
			"timeout_seconds", "allow_failure", "run_when", "needs", "needed_by", "queued_at", "scheduled_at", "finished_at",
			"created_at", "updated_at", "resource_group_id", "bridge", "protected"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return 0, fmt.Errorf("insert builds: %w", err)
	}
	if _, err := tx.Exec(ctx, insertEvents, id, now); err != nil {
		return 0, err
	}
	if hasEnvironment(d.Jobs) {
		if _, err := tx.Exec(ctx, recordEnvironments, id, now); err != nil {
			return 0, fmt.Errorf("record environments: %w", err)
		}
	}
	if len(groups) > 0 {
		// The new pipeline's waiting jobs may have their groups at once.
		if _, err := assignPipelineGroups(ctx, tx, id, now); err != nil {
			return 0, err
		}
	}
	if !perJob {
		return id, nil
	}
	// A job-by-job pipeline may start blocked on a manual job, waiting for a delayed
	// one, or (every job ruled out) already over.
	status := builds.PipelineStatus(builds.TallyJobs(planned))
	if status == builds.PipelinePending {
		return id, nil
	}
	p := lockedPipeline{status: builds.PipelinePending, progressedAt: now, perJob: true}
	_, err = storeStatus(ctx, tx, id, now, p, status, true)
	return id, err
}

const pipelineByID = `
SELECT p.id, p.project_id, p.ref, p.sha, p.stages, p.timeout_strategy, p.status, p.created_at, p.updated_at, p.finished_at,
    p.iid, p.source, p.before_sha, p.variables, COALESCE(p.parent_build_id, 0), COALESCE(pb.pipeline_id, 0), p.depth,
    p.auto_cancel_on_new_commit, p.auto_cancel_on_job_failure, p.created_by
FROM pipelines p LEFT JOIN builds pb ON pb.id = p.parent_build_id WHERE p.id = $1 AND p.project_id = $2`

const buildsOfPipeline = `SELECT ` + buildCols + ` FROM builds b` + buildJoins + `WHERE b.pipeline_id = $1 ORDER BY b.stage_idx, b.id`

// Pipeline returns a pipeline with all its builds (every attempt), by stage.
func (s *Store) Pipeline(ctx context.Context, projectID, id int64) (builds.Pipeline, error) {
	var p builds.Pipeline
	err := s.pool.QueryRow(ctx, pipelineByID, id, projectID).Scan(&p.ID, &p.ProjectID, &p.Ref, &p.SHA, &p.Stages,
		&p.TimeoutStrategy, &p.Status, &p.CreatedAt, &p.UpdatedAt, &p.FinishedAt,
		&p.IID, &p.Source, &p.BeforeSHA, &p.Variables, &p.ParentBuildID, &p.ParentPipelineID, &p.Depth,
		&p.AutoCancel.OnNewCommit, &p.AutoCancel.OnJobFailure, &p.CreatedBy)
	if err != nil {
		return builds.Pipeline{}, notFound(err, fmt.Sprintf("pipeline %d", id))
	}
	rows, err := s.pool.Query(ctx, buildsOfPipeline, id)
	if err != nil {
		return builds.Pipeline{}, err
	}
	p.Builds, err = collectBuilds(rows)
	return p, err
}

// cancelPipelineBuilds and cancelPipelineRunning cancel every unfinished build of pipeline
// $1, or with $3 only the interruptible ones (on_new_commit: interruptible).
const cancelPipelineBuilds = `
WITH b AS (
    UPDATE builds SET status = 'canceled', finished_at = $2, updated_at = $2, ack_deadline = NULL
    WHERE pipeline_id = $1 AND status IN ('created', 'manual', 'scheduled', 'waiting_for_resource', 'pending', 'waiting_for_runner_ack')
      AND (NOT $3::boolean OR coalesce((payload ->> 'interruptible')::boolean, false))
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, 'canceled', $2, jsonb_build_object('actor', $4::text, 'reason', 'pipeline cancel') FROM b`

const cancelPipelineRunning = `
WITH b AS (
    UPDATE builds SET status = 'canceling', cancel_requested = true, updated_at = $2
    WHERE pipeline_id = $1 AND status = 'running'
      AND (NOT $3::boolean OR coalesce((payload ->> 'interruptible')::boolean, false))
    RETURNING id
)
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, 'cancel_requested', $2, jsonb_build_object('actor', $4::text, 'reason', 'pipeline cancel') FROM b`

// CancelPipeline cancels every unfinished build of a pipeline, and its child pipelines
// (GitLab cancels a pipeline's downstream ones with it), in one transaction; each build's
// event names actor.
func (s *Store) CancelPipeline(ctx context.Context, projectID, id int64, now time.Time, actor string) (builds.Pipeline, error) {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT true FROM pipelines WHERE id = $1 AND project_id = $2`, id, projectID).Scan(&ok); err != nil {
			return notFound(err, fmt.Sprintf("pipeline %d", id))
		}
		_, err := cancelPipelineTx(ctx, tx, id, now, false, actor)
		return err
	})
	if err != nil {
		return builds.Pipeline{}, err
	}
	return s.Pipeline(ctx, projectID, id)
}

// CancelInterruptible is CancelPipeline for the interruptible builds only (GitLab's safe
// cancellation, cascaded to the children in the same way).
func (s *Store) CancelInterruptible(ctx context.Context, projectID, id int64, now time.Time, actor string) (builds.Pipeline, int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT true FROM pipelines WHERE id = $1 AND project_id = $2`, id, projectID).Scan(&ok); err != nil {
			return notFound(err, fmt.Sprintf("pipeline %d", id))
		}
		var err error
		n, err = cancelPipelineTx(ctx, tx, id, now, true, actor)
		return err
	})
	if err != nil {
		return builds.Pipeline{}, 0, err
	}
	p, err := s.Pipeline(ctx, projectID, id)
	return p, n, err
}

// unfinishedChildren lists the child pipelines of pipeline $1's bridges that have not ended.
const unfinishedChildren = `
SELECT c.id FROM pipelines c JOIN builds b ON b.id = c.parent_build_id
WHERE b.pipeline_id = $1 AND c.status NOT IN ('success', 'failed', 'canceled')
ORDER BY c.id`

// cancelPipelineTx cancels pipeline id's unfinished builds (only the interruptible ones
// with onlyInterruptible) and its unfinished children's alike, and returns how many builds
// it canceled or asked to cancel.
func cancelPipelineTx(ctx context.Context, tx pgx.Tx, id int64, now time.Time, onlyInterruptible bool, actor string) (int, error) {
	tag, err := tx.Exec(ctx, cancelPipelineBuilds, id, now, onlyInterruptible, actor)
	if err != nil {
		return 0, err
	}
	n := int(tag.RowsAffected())
	if tag, err = tx.Exec(ctx, cancelPipelineRunning, id, now, onlyInterruptible, actor); err != nil {
		return 0, err
	}
	n += int(tag.RowsAffected())
	rows, err := tx.Query(ctx, unfinishedChildren, id)
	if err != nil {
		return 0, err
	}
	children, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	// A child's end (a canceled child) ends its depend bridge, canceling since the
	// statements above, and advances this pipeline: child before parent, the order a
	// child's own finish locks them in.
	for _, c := range children {
		m, err := cancelPipelineTx(ctx, tx, c, now, onlyInterruptible, actor)
		if err != nil {
			return 0, err
		}
		n += m
	}
	_, err = advance(ctx, tx, id, now)
	return n, err
}

// nonNilVariables stores no variables as [] rather than null.
func nonNilVariables(v []builds.Variable) []builds.Variable {
	if v == nil {
		return []builds.Variable{}
	}
	return v
}
