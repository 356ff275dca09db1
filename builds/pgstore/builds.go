package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobapi/jobapi/builds"
)

// buildCols selects a builds.Build from `builds b` joined by buildJoins.
const buildCols = `b.id, b.project_id, b.pipeline_id, b.stage, b.stage_idx, b.name, b.status, b.token_hash,
    b.tags, b.payload, b.timeout_seconds, b.allow_failure, COALESCE(b.runner_id, 0),
    COALESCE(b.runner_manager_id, 0), COALESCE(m.system_id, ''), b.attempt, COALESCE(b.retry_of, 0),
    COALESCE(b.retried_by, 0), b.two_phase, b.cancel_requested, COALESCE(b.failure_reason, ''), b.exit_code,
    COALESCE(b.runner_final_state, ''), b.trace_size, b.created_at, b.queued_at, b.assigned_at,
    b.ack_deadline, b.started_at, b.finished_at, b.updated_at, p.ref, p.sha, b.scheduled_at,
    b.coverage::float8, b.bridge, b.protected`

const buildJoins = ` JOIN pipelines p ON p.id = b.pipeline_id LEFT JOIN runner_managers m ON m.id = b.runner_manager_id `

func scanBuild(row pgx.Row) (builds.Build, error) {
	var b builds.Build
	var status string
	err := row.Scan(buildDests(&b, &status)...)
	b.Status = builds.Status(status)
	return b, err
}

// buildDests are the scan destinations of buildCols.
func buildDests(b *builds.Build, status *string) []any {
	return []any{&b.ID, &b.ProjectID, &b.PipelineID, &b.Stage, &b.StageIdx, &b.Name, status, &b.TokenHash,
		&b.Tags, &b.Payload, &b.TimeoutSeconds, &b.AllowFailure, &b.RunnerID,
		&b.RunnerManagerID, &b.RunnerSystemID, &b.Attempt, &b.RetryOf,
		&b.RetriedBy, &b.TwoPhase, &b.CancelRequested, &b.FailureReason, &b.ExitCode,
		&b.RunnerFinalState, &b.TraceSize, &b.CreatedAt, &b.QueuedAt, &b.AssignedAt,
		&b.AckDeadline, &b.StartedAt, &b.FinishedAt, &b.UpdatedAt, &b.Ref, &b.SHA, &b.ScheduledAt,
		&b.Coverage, &b.Bridge, &b.Protected}
}

// claimedCols is buildCols and what the job payload needs beyond the build (builds.Claimed),
// so that a claim stays one statement: the pipeline's iid, source, before_sha, creation
// time and variables, and the build's dependencies.
const claimedCols = buildCols + `, p.iid, p.source, p.before_sha, p.created_at, p.variables, ` + claimedDependencies + `,
    pr.id, pr.name, pr.path, pr.repo_url, pr.default_branch, pr.created_at, pr.updated_at,
    CASE WHEN pr.id IS NOT NULL THEN ` + projectVariablesOf + `pr.id), '[]'::json) END`

// claimedJoins are buildJoins and the build's project, which the claim reads with the
// build instead of in a statement of its own (no row: an implicit project).
const claimedJoins = buildJoins + `LEFT JOIN projects pr ON pr.id = b.project_id `

// claimedDependencies resolves a claimed build's dependencies to the latest attempt of each
// job in its pipeline: those its payload names, and with depends_on_stages every earlier
// stage's job that declares artifacts. The CASE runs the subquery only for a build that has
// dependencies (payload keys are omitted when empty), so other claims pay nothing for it.
const claimedDependencies = `
CASE WHEN b.payload ? 'dependencies' OR b.payload ? 'depends_on_stages' THEN (
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', d.id, 'name', d.name,
                                                 'artifacts_file', ` + dependencyArtifactsFile + `)
                              ORDER BY d.stage_idx, d.id), '[]')
    FROM builds d
    WHERE d.pipeline_id = b.pipeline_id AND d.retried_by IS NULL AND d.id <> b.id
      AND (d.name IN (SELECT jsonb_array_elements_text(b.payload->'dependencies'))
           OR (b.payload ? 'depends_on_stages' AND d.stage_idx < b.stage_idx AND d.payload ? 'artifacts'))
) END`

// dependencyArtifactsFile is a dependency d's stored archive as the payload shows it,
// {filename, size}, or NULL while it has none (not uploaded, expired, deleted): the runner
// then skips the dependency (shells/abstract.go jobArtifacts). One index probe per
// dependency, on job_artifacts' (build_id, file_type) key.
const dependencyArtifactsFile = `(SELECT jsonb_build_object('filename', a.filename, 'size', a.size)
    FROM job_artifacts a WHERE a.build_id = d.id AND a.file_type = 'archive')`

func scanClaimed(row pgx.Row) (builds.Claimed, error) {
	var c builds.Claimed
	var status string
	var (
		projectID                        *int64
		name, path, repoURL, defaultBrch *string
		createdAt, updatedAt             *time.Time
		vars                             []variableRow
	)
	err := row.Scan(append(buildDests(&c.Build, &status), &c.Pipeline.IID, &c.Pipeline.Source,
		&c.Pipeline.BeforeSHA, &c.Pipeline.CreatedAt, &c.Pipeline.Variables, &c.Dependencies,
		&projectID, &name, &path, &repoURL, &defaultBrch, &createdAt, &updatedAt, &vars)...)
	c.Status = builds.Status(status)
	c.Project = &builds.JobProject{}
	if err == nil && projectID != nil {
		*c.Project = jobProjectOf(&builds.Project{ID: *projectID, Name: *name, Path: *path, RepoURL: *repoURL,
			DefaultBranch: *defaultBrch, CreatedAt: *createdAt, UpdatedAt: *updatedAt}, vars)
	}
	return c, err
}

func collectBuilds(rows pgx.Rows) ([]builds.Build, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Build, error) { return scanBuild(row) })
}

const buildByID = `SELECT ` + buildCols + ` FROM builds b` + buildJoins + `WHERE b.id = $1`

// Build returns one build.
func (s *Store) Build(ctx context.Context, id int64) (builds.Build, error) {
	b, err := scanBuild(s.pool.QueryRow(ctx, buildByID, id))
	return b, notFound(err, fmt.Sprintf("build %d", id))
}

const buildsByStatus = `SELECT ` + buildCols + ` FROM builds b` + buildJoins + `
WHERE b.status = $1 ORDER BY b.id LIMIT $2 OFFSET $3`

const countByStatus = `SELECT count(*) FROM builds WHERE status = $1`

// BuildsByStatus lists builds in one state, oldest first.
func (s *Store) BuildsByStatus(ctx context.Context, status builds.Status, p builds.Page) ([]builds.Build, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, buildsByStatus, string(status), limit, off)
	if err != nil {
		return nil, 0, err
	}
	list, err := collectBuilds(rows)
	if err != nil {
		return nil, 0, err
	}
	var total int
	if err := s.pool.QueryRow(ctx, countByStatus, string(status)).Scan(&total); err != nil {
		return nil, 0, err
	}
	return list, total, nil
}

const eventsOf = `
SELECT id, build_id, type, at, runner_manager, detail, count(*) OVER ()
FROM build_events WHERE build_id = $1 ORDER BY id LIMIT $2 OFFSET $3`

// Events returns a build's history, oldest first.
func (s *Store) Events(ctx context.Context, buildID int64, p builds.Page) ([]builds.Event, int, error) {
	limit, off := offset(p)
	rows, err := s.pool.Query(ctx, eventsOf, buildID, limit, off)
	if err != nil {
		return nil, 0, err
	}
	var total int
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (builds.Event, error) {
		var e builds.Event
		err := row.Scan(&e.ID, &e.BuildID, &e.Type, &e.At, &e.RunnerManager, &e.Detail, &total)
		return e, err
	})
	if err == nil && len(list) == 0 && off > 0 {
		// Past the last page the window count has no row to ride on.
		err = s.pool.QueryRow(ctx, `SELECT count(*) FROM build_events WHERE build_id = $1`, buildID).Scan(&total)
	}
	return list, total, err
}

// addEvent appends an event that changes no state, only while the build is in one of the
// states $6 (builds.EventStatuses of the event): the table's rule is checked against the
// row's state at the time of the write, not against a read made earlier. FOR SHARE makes
// that so: a status change in flight (an UPDATE holds the row) is waited for and the
// state it committed is the one checked, and none can start before this commits. It
// returns the state it found and whether the event went in.
const addEvent = `
WITH b AS (
    SELECT id, status FROM builds WHERE id = $1 FOR SHARE
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT id, $2::text, $3::timestamptz, $4::text, $5::jsonb FROM b WHERE status = ANY($6::text[])
    RETURNING build_id
)
SELECT status, EXISTS (SELECT 1 FROM e) FROM b`

// AddEvent appends to a build's history an event that changes no state; see addEventTx.
func (s *Store) AddEvent(ctx context.Context, e builds.Event) error {
	return addEventTx(ctx, s.pool, e)
}

// addEventTx runs addEvent: a *builds.TransitionError when the table does not declare
// e.Type without a state change in the state the build is in, builds.ErrNotFound without
// the build. In a transaction that changed the row before, the state is its own.
func addEventTx(ctx context.Context, q querier, e builds.Event) error {
	if e.Detail == nil {
		e.Detail = map[string]any{}
	}
	allowed := builds.EventStatuses(e.Type)
	statuses := make([]string, len(allowed))
	for i, st := range allowed {
		statuses[i] = string(st)
	}
	var status string
	var added bool
	err := q.QueryRow(ctx, addEvent, e.BuildID, e.Type, e.At, e.RunnerManager, e.Detail, statuses).Scan(&status, &added)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("build %d: %w", e.BuildID, builds.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if !added {
		return &builds.TransitionError{Kind: "build", From: status, To: status, Event: e.Type}
	}
	return nil
}

// claimCandidate locks the oldest pending build this runner may run. SKIP LOCKED lets
// concurrent claims take different builds instead of queueing on the same row.
const claimCandidate = claimMatching + claimOldest

// claimUntaggedCandidate is claimCandidate for a runner without tags, which can run untagged
// builds only (Claim checks run_untagged). It walks builds_pending_untagged_idx, which holds
// nothing else: claimCandidate walks builds_pending_idx past every older tagged build, and
// through all of them when none matches (1,000 idle runners after a queue bump, with 100,000
// builds pending for another pool, were 1,000 scans of 100,000 rows). Its only conditions on
// the row are the index's own predicate: with claimCandidate's tag conditions as well,
// Postgres multiplied two default selectivities, expected one row, and fetched and sorted
// every untagged pending build instead of walking the index (124 ms a claim with 15,000
// pending). $1 and $2 remain, as a one-time filter, so that it takes claimCandidate's
// parameters.
const claimUntaggedCandidate = claimUntaggedMatching + claimOldest

const claimUntaggedMatching = `
SELECT b.id, b.project_id FROM builds b
WHERE b.status = 'pending' AND cardinality(b.tags) = 0
  AND cardinality($1::text[]) = 0 AND $2::boolean
  AND NOT b.bridge`

// claimProtected narrows a claim to builds of protected refs, for a ref_protected runner.
// Its own statements rather than a parameter: a not_protected runner's claim stays the plan
// it was, and a ref_protected one walks builds_pending_protected_idx (migration 000028),
// which holds only pending protected builds, instead of every unprotected one before them.
const claimProtected = `
  AND b.protected`

const (
	claimProtectedCandidate         = claimMatching + claimProtected + claimOldest
	claimProtectedUntaggedCandidate = claimUntaggedMatching + claimProtected + claimOldest
)

const claimMatching = `
SELECT b.id, b.project_id FROM builds b
WHERE b.status = 'pending'
  AND b.tags <@ $1::text[]
  AND ($2::boolean OR cardinality(b.tags) > 0)
  AND NOT b.bridge`

const claimOldest = `
ORDER BY b.queued_at, b.id
LIMIT 1
FOR UPDATE SKIP LOCKED`

// startPipeline (a CTE body; b is the assigned build, $6 the time) marks a pending pipeline
// running once one of its builds is on a runner, as advance would derive it.
const startPipeline = `UPDATE pipelines SET status = 'running', updated_at = $6
    WHERE id = (SELECT pipeline_id FROM b) AND status = 'pending'`

const assignBuild = `
WITH b AS (
    UPDATE builds SET status = $2, token_hash = $3, runner_id = $4, runner_manager_id = $5,
        assigned_at = $6, updated_at = $6, two_phase = $8,
        ack_deadline = CASE WHEN $8 THEN $7::timestamptz END,
        started_at = CASE WHEN $8 THEN NULL ELSE $6::timestamptz END,
        run_deadline = CASE WHEN $8 THEN NULL ELSE $6::timestamptz + make_interval(secs => timeout_seconds) END
    WHERE id = $1 AND status = 'pending'
    RETURNING *
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT id, 'assigned', $6, $9, jsonb_build_object('two_phase', $8::boolean, 'runner_id', $4::bigint)
    FROM b
), pl AS (
    ` + startPipeline + `
)
SELECT ` + claimedCols + ` FROM b` + claimedJoins

// assignOldest does the claim in one statement when the two-phase decision cannot depend on
// the build (the runner did not declare the capability, or the flag's answer holds for every
// project): one round trip per job request. assignOldestUntagged is the same for a runner
// without tags (see claimUntaggedCandidate).
const (
	assignOldest = `
WITH c AS (` + claimCandidate + assignCandidate
	assignOldestUntagged = `
WITH c AS (` + claimUntaggedCandidate + assignCandidate
	assignOldestProtected = `
WITH c AS (` + claimProtectedCandidate + assignCandidate
	assignOldestProtectedUntagged = `
WITH c AS (` + claimProtectedUntaggedCandidate + assignCandidate
)

// assignCandidate follows a CTE c that locked one candidate: it assigns the build as
// assignBuild does, waiting for an ack ($9: two-phase, $8 waiting_for_runner_ack, $10 the ack
// deadline) or running, records the event and starts the pipeline.
const assignCandidate = `
), b AS (
    UPDATE builds SET status = $8, token_hash = $3, runner_id = $4, runner_manager_id = $5,
        assigned_at = $6, updated_at = $6, two_phase = $9,
        ack_deadline = CASE WHEN $9 THEN $10::timestamptz END,
        started_at = CASE WHEN $9 THEN NULL ELSE $6::timestamptz END,
        run_deadline = CASE WHEN $9 THEN NULL ELSE $6::timestamptz + make_interval(secs => builds.timeout_seconds) END
    FROM c WHERE builds.id = c.id
    RETURNING builds.*
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT id, 'assigned', $6, $7, jsonb_build_object('two_phase', $9::boolean, 'runner_id', $4::bigint)
    FROM b
), pl AS (
    ` + startPipeline + `
)
SELECT ` + claimedCols + ` FROM b` + claimedJoins

// Claim hands the oldest matching pending build to a runner manager.
func (s *Store) Claim(ctx context.Context, c builds.Claim) (builds.Claimed, error) {
	tags := c.Runner.Tags
	if tags == nil {
		tags = []string{}
	}
	candidate, oldest := claimCandidate, assignOldest
	if len(tags) == 0 {
		if !c.Runner.RunUntagged {
			return builds.Claimed{}, builds.ErrNoBuild // it may run neither tagged nor untagged builds
		}
		candidate, oldest = claimUntaggedCandidate, assignOldestUntagged
		if c.Runner.ProtectedOnly() {
			candidate, oldest = claimProtectedUntaggedCandidate, assignOldestProtectedUntagged
		}
	} else if c.Runner.ProtectedOnly() {
		candidate, oldest = claimProtectedCandidate, assignOldestProtected
	}
	if c.TwoPhase == nil {
		status := builds.AssignedStatus(c.WaitForAck)
		if err := builds.CheckTransition(builds.StatusPending, status, builds.EventAssigned, ""); err != nil {
			return builds.Claimed{}, err
		}
		b, err := scanClaimed(s.pool.QueryRow(ctx, oldest, tags, c.Runner.RunUntagged, c.TokenHash,
			c.Runner.ID, c.ManagerID, c.Now, c.SystemID, string(status), c.WaitForAck, c.AckDeadline))
		if errors.Is(err, pgx.ErrNoRows) {
			return builds.Claimed{}, builds.ErrNoBuild
		}
		return b, runnerGone(err)
	}
	// Two round trips: BEGIN with the candidate's lock, then the assignment with COMMIT.
	var b builds.Claimed
	err := s.inPipeTx(ctx, func(tx *pipeTx) error {
		var id, projectID int64
		if err := tx.QueryRow(ctx, candidate, tags, c.Runner.RunUntagged).Scan(&id, &projectID); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return builds.ErrNoBuild
			}
			return err
		}
		twoPhase := c.TwoPhase(projectID)
		status := builds.AssignedStatus(twoPhase)
		if err := builds.CheckTransition(builds.StatusPending, status, builds.EventAssigned, ""); err != nil {
			return err
		}
		return tx.queryRowAndCommit(ctx, func(row pgx.Row) (err error) {
			b, err = scanClaimed(row)
			return err
		}, assignBuild, id, string(status), c.TokenHash, c.Runner.ID,
			c.ManagerID, c.Now, c.AckDeadline, twoPhase, c.SystemID)
	})
	return b, runnerGone(err)
}

// runnerGone: a claim that names a runner or manager deleted since the request was
// authenticated (unregister, operator delete, the stale-manager pass) breaks the builds'
// foreign keys; nothing was assigned, and the runner's token is no longer valid.
func runnerGone(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" && // foreign_key_violation
		(pgErr.ConstraintName == "builds_runner_id_fkey" || pgErr.ConstraintName == "builds_runner_manager_id_fkey") {
		return fmt.Errorf("%w: runner deleted during the claim", builds.ErrRunnerForbidden)
	}
	return err
}

// acknowledge is the whole ack in one statement: the job token is part of the
// compare-and-set (the fence), so a PUT needs no read first, and it returns only what the
// caller needs instead of the joined build row. With $4 it also returns what a replica that
// never saw the build keeps of it for the trace PATCHes to come (builds.Ack.ReadMasked): the
// masked variables of its payload and of its project, so that a cold ack reads neither the
// build nor the project in statements of their own.
const acknowledge = `
WITH b AS (
    UPDATE builds SET status = 'running', started_at = $3, updated_at = $3, ack_deadline = NULL,
        run_deadline = $3::timestamptz + make_interval(secs => timeout_seconds)
    WHERE id = $1 AND token_hash = $2 AND status = 'waiting_for_runner_ack'
    RETURNING id, runner_manager_id, assigned_at, pipeline_id, stage_idx, trace_size, project_id,
        CASE WHEN $4 THEN payload->'variables' END AS variables
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT b.id, 'acknowledged', $3,
           COALESCE((SELECT m.system_id FROM runner_managers m WHERE m.id = b.runner_manager_id), ''),
           jsonb_strip_nulls(jsonb_build_object('assign_to_ack_seconds',
               extract(epoch FROM $3::timestamptz - b.assigned_at)::float8))
    FROM b
)
SELECT assigned_at, pipeline_id, stage_idx, trace_size,
    CASE WHEN $4 THEN (SELECT jsonb_agg(v) FROM jsonb_array_elements(b.variables) v WHERE v @> '{"masked": true}') END,
    CASE WHEN $4 THEN (SELECT json_agg(json_build_object('key', v.key, 'value', v.value) ORDER BY v.key)
                       FROM project_variables v WHERE v.project_id = b.project_id AND v.masked) END
FROM b`

// Acknowledge moves a waiting build whose job token hashes to a.TokenHash to running and
// returns when it was assigned, its pipeline and stage, its stored log size, and with
// a.ReadMasked its masked variables; ErrConflict if no such build waits.
func (s *Store) Acknowledge(ctx context.Context, a builds.Ack) (builds.Acked, error) {
	var assignedAt *time.Time
	var acked builds.Acked
	var vars, projectVars []builds.Variable
	err := s.pool.QueryRow(ctx, acknowledge, a.ID, a.TokenHash, a.Now, a.ReadMasked).
		Scan(&assignedAt, &acked.PipelineID, &acked.StageIdx, &acked.TraceSize, &vars, &projectVars)
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.Acked{}, builds.ErrConflict
	}
	if err != nil {
		return builds.Acked{}, err
	}
	if assignedAt != nil {
		acked.AssignedAt = *assignedAt
	}
	if a.ReadMasked {
		acked.Masked = &builds.AckedMasked{Variables: vars, Project: projectVars}
		for i := range acked.Masked.Project {
			acked.Masked.Project[i].Masked = true
		}
	}
	return acked, nil
}

// keepAlive is the whole keep-alive in one statement, like acknowledge: the job token and
// the waiting state are the compare-and-set, the new deadline of record ($4, capped at the
// assignment + $5 seconds when $5 > 0, and refused once that has passed) and the event go
// with it. The sweeper fails a build only while its deadline of record has passed and
// holds the row while it decides, so the two are ordered by the row: a keep-alive that
// waits for a sweep finds the build failed (no row), a sweep after a keep-alive finds the
// deadline moved.
const keepAlive = `
WITH b AS (
    UPDATE builds SET ack_deadline = CASE WHEN $5::float8 > 0
            THEN LEAST($4::timestamptz, COALESCE(assigned_at, $3::timestamptz) + make_interval(secs => $5::float8))
            ELSE $4::timestamptz END
    WHERE id = $1 AND token_hash = $2 AND status = 'waiting_for_runner_ack'
      AND ($5::float8 <= 0 OR COALESCE(assigned_at, $3::timestamptz) + make_interval(secs => $5::float8) > $3::timestamptz)
    RETURNING id, pipeline_id, COALESCE(runner_manager_id, 0) AS runner_manager_id, ack_deadline
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT b.id, 'keepalive', $3,
           COALESCE((SELECT m.system_id FROM runner_managers m WHERE m.id = b.runner_manager_id), ''),
           jsonb_build_object('ttl_seconds', extract(epoch FROM b.ack_deadline - $3::timestamptz)::float8)
    FROM b
)
SELECT pipeline_id, runner_manager_id, ack_deadline FROM b`

// KeepAlive moves the deadline of record of a waiting build whose job token hashes to
// k.TokenHash and records the keepalive event; ErrConflict if no such build waits or its
// max wait has passed.
func (s *Store) KeepAlive(ctx context.Context, k builds.KeepAlive) (builds.KeptAlive, error) {
	var kept builds.KeptAlive
	err := s.pool.QueryRow(ctx, keepAlive, k.ID, k.TokenHash, k.Now, k.Now.Add(k.TTL), k.MaxWait.Seconds()).
		Scan(&kept.PipelineID, &kept.RunnerManagerID, &kept.Deadline)
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.KeptAlive{}, builds.ErrConflict
	}
	return kept, err
}

const touch = `UPDATE builds SET updated_at = $2 WHERE id = $1 AND updated_at < $2`

// Touch records liveness.
func (s *Store) Touch(ctx context.Context, id int64, now time.Time) error {
	_, err := s.pool.Exec(ctx, touch, id, now)
	return err
}

const extendAck = `UPDATE builds SET ack_deadline = $2 WHERE id = $1 AND status = 'waiting_for_runner_ack'`

// ExtendAck moves the deadline of record of a waiting build.
func (s *Store) ExtendAck(ctx context.Context, id int64, deadline time.Time) error {
	_, err := s.pool.Exec(ctx, extendAck, id, deadline)
	return err
}

// requestCancel records cancel_requested with the change it names, in the same statement.
const requestCancel = `
WITH b AS (
    UPDATE builds SET status = 'canceling', cancel_requested = true, updated_at = $2
    WHERE id = $1 AND status = 'running'
    RETURNING *
), e AS (
    INSERT INTO build_events (build_id, type, at, runner_manager, detail)
    SELECT b.id, 'cancel_requested', $2,
           COALESCE((SELECT m.system_id FROM runner_managers m WHERE m.id = b.runner_manager_id), ''),
           jsonb_build_object('actor', $3::text)
    FROM b
)
SELECT ` + buildCols + ` FROM b` + buildJoins

// RequestCancel marks a running build canceling for actor, with its event; the runner
// learns it from Job-Status.
func (s *Store) RequestCancel(ctx context.Context, id int64, now time.Time, actor string) (builds.Build, error) {
	b, err := scanBuild(s.pool.QueryRow(ctx, requestCancel, id, now, actor))
	if errors.Is(err, pgx.ErrNoRows) {
		return builds.Build{}, builds.ErrConflict
	}
	return b, err
}

// activeCounts reads the builds in unfinished states through builds_status_idx: a metric
// sample that costs what the active queue costs, not a scan of all history.
const activeCounts = `
SELECT status, count(*)::int FROM builds
WHERE status IN ('created', 'manual', 'scheduled', 'pending', 'waiting_for_runner_ack', 'running', 'canceling')
GROUP BY status`

// ActiveCounts returns how many builds are in each unfinished state.
func (s *Store) ActiveCounts(ctx context.Context) (map[builds.Status]int, error) {
	rows, err := s.pool.Query(ctx, activeCounts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[builds.Status]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[builds.Status(st)] = n
	}
	return out, rows.Err()
}
