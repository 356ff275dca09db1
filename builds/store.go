package builds

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors returned by Store and Leases implementations and by the Service.
var (
	// ErrNotFound: no such runner, pipeline or build.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a compare-and-set found the row in another state; re-read and decide again.
	ErrConflict = errors.New("state changed concurrently")
	// ErrNoBuild: nothing to hand out to this runner.
	ErrNoBuild = errors.New("no build for this runner")
	// ErrUnavailable: a backing service is down and the answer cannot be given now.
	ErrUnavailable = errors.New("temporarily unavailable")
	// ErrTooManyManagers: a new system_id would take a runner past its cap of managers.
	ErrTooManyManagers = errors.New("too many runner managers")
)

// Claim asks the store to hand the oldest matching pending build to a runner manager.
type Claim struct {
	Runner    Runner
	ManagerID int64
	SystemID  string
	TokenHash []byte
	Now       time.Time
	// TwoPhase decides, for the locked candidate, whether it waits for an ack. It runs
	// inside the claim transaction, so it must not block (flags evaluate from memory).
	// Nil: WaitForAck decides for any build, and the claim is one statement.
	TwoPhase func(projectID int64) bool
	// WaitForAck, with TwoPhase nil, is whether the build waits for an ack (two-phase).
	WaitForAck bool
	// AckDeadline is the deadline of record for a two-phase assignment.
	AckDeadline time.Time
}

// Claimed is a claimed build with what its job payload needs beyond the build row, read in
// the claim's own statement.
type Claimed struct {
	Build
	Pipeline JobPipeline
	// Dependencies are resolved from the payload's Dependencies and DependsOnStages.
	Dependencies []Dependency
	// Project is the build's project and its variables as the claim read them (nil: the
	// store does not read them; the Service asks its ProjectReader).
	Project *JobProject
}

// Finish moves a build to an end state in one transaction: the compare-and-set, its event,
// the automatic retry the policy allows, and the pipeline's stage advancement.
type Finish struct {
	BuildID          int64
	From             []Status
	To               Status
	Reason           string
	ExitCode         *int64
	RunnerFinalState string
	Event            string
	Detail           map[string]any
	RunnerManager    string
	Now              time.Time
	// TokenHash, when set, fences the change on the build's job token as well, and the
	// event's runner manager comes from the build (RunnerManager is ignored): a runner's
	// PUT then needs no read of the build first.
	TokenHash []byte
	// Policy nil: no automatic retry.
	Policy *RetryPolicy
	// AlsoRetryAs: another reason whose budget may pay for the retry (a decline is a
	// provisioning failure whatever reason the runner gave).
	AlsoRetryAs string
	// Flush, when set, stores the build's live log bytes with the finish, in the finish's
	// own UPDATE of the build row (one statement: a second UPDATE of the row in the
	// transaction would take a KEY SHARE lock on the pipeline row for the foreign key, which
	// concurrent finishes then upgrade to the pipeline lock and deadlock on, as 61629c9 did).
	// It has the compare-and-set of a live log flush: nothing is stored when the stored size
	// is not Flush.Offset, and the finish goes on. Finished.Build.TraceSize then says what
	// Postgres holds.
	Flush *TraceFlush
	// AckDeadlineBy, when set, fences the change on the deadline of record too: only a
	// build whose ack_deadline is at or before it changes (the ack sweeper's timeout, so
	// that a keep-alive that moved the deadline first wins).
	AckDeadlineBy time.Time
}

// TraceFlush is live log bytes that start at Offset, moving to Postgres.
type TraceFlush struct {
	Offset int64
	Data   []byte
}

// Finished is the outcome of a Finish.
type Finished struct {
	Build Build
	// Retry is the new attempt, when one was created.
	Retry *Build
	// Queued is true when builds became pending (a retry or a released stage).
	Queued bool
	// CancelPipeline: the build failed, not allowed to and not retried, in a pipeline with
	// workflow:auto_cancel:on_job_failure: all; the caller cancels the pipeline once this
	// transaction is committed (Service.cancelOnJobFailure).
	CancelPipeline bool
}

// Redundant is a pipeline a newer one cancels, with its own on_new_commit setting.
type Redundant struct {
	ID          int64
	OnNewCommit string
}

// PipelineRef names a pipeline with its project.
type PipelineRef struct {
	ProjectID, ID int64
}

// SweepParams drives one batch of the ack sweeper.
type SweepParams struct {
	Now     time.Time
	Batch   int
	MaxWait time.Duration
	// Alive reports, for builds whose deadline of record passed, which still hold a live
	// ack key and how long it has left. An error leaves the batch untouched.
	Alive  func(ctx context.Context, ids []int64) (map[int64]time.Duration, error)
	Policy RetryPolicy
}

// SweepResult counts what one sweep batch did.
type SweepResult struct {
	Candidates  int
	Extended    int // still kept alive in Redis; deadline of record moved
	TimedOut    int
	Retried     int
	Exhausted   int
	Queued      bool
	TimedOutIDs []int64
	Pipelines   []int64
	// Skipped candidates could not be checked because Redis failed (LeaseErr).
	Skipped  int
	LeaseErr error
}

// Page selects a slice of a listing (1-based page).
type Page struct {
	Page    int
	PerPage int
}

// Store is the state of record (Postgres).
type Store interface {
	// CreateRunner stores a runner with its token's hash and r.TokenExpiresAt.
	CreateRunner(ctx context.Context, r Runner, tokenHash []byte) (Runner, error)
	// RunnerByTokenHash finds the runner of a current or previous token; TokenExpiresAt is
	// that token's. ErrNotFound when no runner has it.
	RunnerByTokenHash(ctx context.Context, hash []byte) (Runner, error)
	// UpsertManager records a manager's latest contact. A new system_id is refused with
	// ErrTooManyManagers when the runner has maxManagers others already (0: no cap);
	// concurrent first contacts may overshoot the cap by their number.
	UpsertManager(ctx context.Context, runnerID int64, systemID string, info ManagerInfo, now time.Time, maxManagers int) (Manager, error)
	// DeleteRunner removes a runner and its managers in one transaction with the builds it
	// holds: each waiting, running or canceling one is finished as d.Finish says (its retry
	// and its pipeline's advancement included). Builds keep their rows (runner unset).
	// ErrNotFound when there is no such runner.
	DeleteRunner(ctx context.Context, d RunnerDeletion) (RunnerDeleted, error)
	// DeleteManager removes one manager of a runner. ErrNotFound when there is none.
	DeleteManager(ctx context.Context, runnerID int64, systemID string) error
	// DeleteStaleManagers removes up to limit managers last seen before the given time and
	// returns how many it removed. Safe on every replica at once (SKIP LOCKED).
	DeleteStaleManagers(ctx context.Context, before time.Time, limit int) (int, error)
	// RotateRunnerToken applies a runner's reset of its own token (see TokenRotation), a
	// compare-and-set on the presented token. ErrNotFound when that token is no longer
	// valid (replaced, expired, or the runner is gone).
	RotateRunnerToken(ctx context.Context, r TokenRotation) error

	CreatePipeline(ctx context.Context, d PipelineDefinition, now time.Time) (Pipeline, error)
	// PendingBridges lists pending bridge builds, oldest first, with their pipelines.
	PendingBridges(ctx context.Context, limit int) ([]PendingBridge, error)
	// CreateChild stores the child pipeline of a pending bridge (or its failure) and moves
	// the bridge on, in one transaction. ErrBridgeTaken when the bridge is not pending or
	// has a child already; nothing is written then.
	CreateChild(ctx context.Context, c ChildPipeline) (ChildCreated, error)
	// Bridges lists the bridge builds of a pipeline of a project, with their children;
	// ErrNotFound when the project has no such pipeline.
	Bridges(ctx context.Context, projectID, pipelineID int64) ([]BridgeView, error)
	Pipeline(ctx context.Context, projectID, id int64) (Pipeline, error)
	// RetryPipeline creates a new attempt of each latest failed or canceled build of the
	// pipeline and advances it, in one transaction; it returns the new attempts (none: nothing
	// to retry). ErrNotFound.
	RetryPipeline(ctx context.Context, projectID, id int64, now time.Time, actor string) ([]Build, error)
	// DeletePipeline deletes a pipeline whose builds have all finished, with its builds and
	// what hangs off them, and returns the builds' ids and statuses. ErrNotFound,
	// ErrPipelineBusy.
	DeletePipeline(ctx context.Context, projectID, id int64) ([]Build, error)
	CancelPipeline(ctx context.Context, projectID, id int64, now time.Time, actor string) (Pipeline, error)

	Claim(ctx context.Context, c Claim) (Claimed, error)
	Build(ctx context.Context, id int64) (Build, error)
	BuildsByStatus(ctx context.Context, status Status, p Page) ([]Build, int, error)
	Events(ctx context.Context, buildID int64, p Page) ([]Event, int, error)
	// AddEvent appends an event that changes no state: a *TransitionError when
	// BuildTransitions does not declare e.Type without a state change for the build's
	// state at the time of the write (see EventStatuses), ErrNotFound without the build.
	AddEvent(ctx context.Context, e Event) error

	// Acknowledge: waiting_for_runner_ack → running for the build whose job token hashes
	// to a.TokenHash, in one statement; it returns when the build was assigned, its
	// pipeline, and with a.ReadMasked its masked variables. ErrConflict when no such build
	// waits (wrong token, not waiting, gone): the caller reads the build to say why.
	Acknowledge(ctx context.Context, a Ack) (Acked, error)
	// KeepAlive moves the deadline of record of the waiting build whose job token hashes
	// to k.TokenHash and records its keepalive event, in one statement: the sweeper fails
	// only a build whose deadline of record has passed, so whichever of the two commits
	// first wins. ErrConflict when no such build waits (wrong token, timed out, gone) or
	// its max wait has passed: the caller reads the build to say why.
	KeepAlive(ctx context.Context, k KeepAlive) (KeptAlive, error)
	// Touch records runner liveness (callers throttle it).
	Touch(ctx context.Context, id int64, now time.Time) error
	// ExtendAck moves the deadline of record of a waiting build.
	ExtendAck(ctx context.Context, id int64, deadline time.Time) error
	// Finish: ErrConflict when the build is not in f.From (or the token differs), a
	// *TransitionError when BuildTransitions does not declare the change.
	Finish(ctx context.Context, f Finish) (Finished, error)
	// RequestCancel: running → canceling for actor, with its cancel_requested event.
	// ErrConflict when not running.
	RequestCancel(ctx context.Context, id int64, now time.Time, actor string) (Build, error)
	// RetryBuild creates a new attempt of a finished, latest build (operator retry).
	RetryBuild(ctx context.Context, id int64, now time.Time, actor string) (Build, error)
	// PlayBuild: manual → pending (operator play), reopening what waited for it, and
	// advances its pipeline. ErrConflict when the build is not manual.
	PlayBuild(ctx context.Context, id int64, now time.Time, actor string) (Build, error)
	// EnqueueDue moves up to batch scheduled builds whose time has come to pending and
	// advances their pipelines. Safe on every replica at once (SKIP LOCKED).
	EnqueueDue(ctx context.Context, now time.Time, batch int) (DueResult, error)

	// AssignFreeResourceGroups gives up to batch free resource groups that have a job
	// waiting to their next job (see the transition table's legend ⁴), and returns how
	// many builds it queued. Groups are assigned in the transactions that free them; this
	// picks up one whose candidate was locked at that moment. Safe on every replica.
	AssignFreeResourceGroups(ctx context.Context, now time.Time, batch int) (int, error)

	// AppendTrace appends data at offset when offset equals the stored size and the build
	// is on a runner; it returns the new size and the build's state. *TraceRangeError when
	// offsets disagree, ErrConflict when the build is not on a runner.
	AppendTrace(ctx context.Context, id int64, offset int64, data []byte, now time.Time) (int64, Status, error)
	Trace(ctx context.Context, id int64) ([]byte, error)
	// FlushTrace stores live log bytes that start at offset, when offset is the stored size
	// and the build is on a runner (recording its liveness too); it returns the stored size
	// afterwards, whether or not it stored them. ErrNotFound when there is no such build.
	FlushTrace(ctx context.Context, id int64, offset int64, data []byte, now time.Time) (int64, error)
	// TraceState returns the build's state and stored log size, recording the runner's
	// liveness when it is on a runner. ErrNotFound when there is no such build.
	TraceState(ctx context.Context, id int64, now time.Time) (Status, int64, error)
	// TraceChunks returns up to limit stored chunks of a log from offset from on, in order
	// (the first one may start before from), for reading a log as a stream.
	TraceChunks(ctx context.Context, id, from int64, limit int) ([]TraceChunk, error)
	// DeleteTraceChunks deletes a build's stored chunks (its log was archived).
	DeleteTraceChunks(ctx context.Context, id int64) error
	// TraceRange returns up to max bytes of a build's stored log from offset from, and the
	// size of the whole stored log. ErrNotFound when there is no such build.
	TraceRange(ctx context.Context, id, from, max int64) (data []byte, size int64, err error)
	// TraceLines counts the line breaks in the first before bytes of a build's stored log.
	TraceLines(ctx context.Context, id, before int64) (int64, error)
	// RedundantPipelines lists, oldest first, up to limit pipelines that pipeline id (of
	// sha on ref) makes redundant under GitLab's auto-cancel rule (see CancelRedundant),
	// each with its on_new_commit setting (conservative or interruptible).
	RedundantPipelines(ctx context.Context, projectID int64, ref, sha string, id int64, limit int) ([]Redundant, error)
	// CancelInterruptible cancels the unfinished interruptible builds of a pipeline and of
	// its unfinished child pipelines (on_new_commit: interruptible) in one transaction, and
	// returns the pipeline and how many builds it canceled or asked to cancel.
	CancelInterruptible(ctx context.Context, projectID, id int64, now time.Time, actor string) (Pipeline, int, error)
	// FailedToCancel lists up to limit alive pipelines with on_job_failure: all in which a
	// latest attempt failed (not allowed to) while others can still be canceled.
	FailedToCancel(ctx context.Context, limit int) ([]PipelineRef, error)

	SweepExpiredAcks(ctx context.Context, p SweepParams) (SweepResult, error)
	// HandleStuckStages applies each stuck pipeline's timeout strategy (SPEC §6).
	HandleStuckStages(ctx context.Context, p StuckParams) (StuckResult, error)
	// Reap fails or cancels builds that runners abandoned (SPEC §5 reapers).
	Reap(ctx context.Context, p ReapParams) (ReapResult, error)
	// PipelineProgress reads what a waiter reports.
	PipelineProgress(ctx context.Context, projectID, id int64) (PipelineProgress, error)
	Ping(ctx context.Context) error
}

// Ack is a runner's acknowledgement of build ID, with the hash of the job token it sent.
type Ack struct {
	ID        int64
	TokenHash []byte
	Now       time.Time
	// ReadMasked asks for the build's masked variables too (Acked.Masked): a replica that
	// did not assign the build has none of it in memory, and its runner's trace PATCHes
	// need them.
	ReadMasked bool
}

// Acked is what an acknowledgement returns: when the build was assigned (the latency
// metric) and its pipeline (the change hint for live views).
type Acked struct {
	AssignedAt time.Time
	PipelineID int64
	StageIdx   int
	// TraceSize is the build's durable log size as the ack left it (the live log starts there).
	TraceSize int64
	// Masked is set when Ack.ReadMasked asked for it.
	Masked *AckedMasked
}

// KeepAlive is a runner's keep-alive (PUT state=pending) of waiting build ID, with the hash
// of the job token it sent.
type KeepAlive struct {
	ID        int64
	TokenHash []byte
	Now       time.Time
	// TTL is the wait granted from Now. MaxWait, when > 0, caps the new deadline at the
	// assignment + MaxWait, and refuses the keep-alive once that has passed.
	TTL     time.Duration
	MaxWait time.Duration
}

// KeptAlive is what a keep-alive returns.
type KeptAlive struct {
	PipelineID      int64
	RunnerManagerID int64
	// Deadline is the new deadline of record.
	Deadline time.Time
}

// AckedMasked are the masked variables of an acknowledged build: of its payload, and of
// its project (key and value; none for an implicit project).
type AckedMasked struct {
	Variables []Variable
	Project   []Variable
}

// PipelineProgress is a waiter's view of a pipeline, read from Postgres.
type PipelineProgress struct {
	Status string
	// Remaining counts the latest attempts not finished yet.
	Remaining int
	// Finished lists every finished build (all attempts), by id.
	Finished []int64
}

// StuckParams drives one stuck-stage check.
type StuckParams struct {
	Now     time.Time
	Timeout time.Duration
	Batch   int
}

// StuckPipeline describes one pipeline found stuck and what was done about it.
type StuckPipeline struct {
	PipelineID int64
	ProjectID  int64
	Stage      string
	Strategy   string
	Builds     []StuckBuild
}

// StuckBuild is a build a stuck stage was waiting for, with the state it was stuck in.
type StuckBuild struct {
	ID     int64
	Name   string
	Status Status
}

// StuckResult is what one stuck-stage check did.
type StuckResult struct {
	Checked  int
	Progress int // candidates that had progressed after all (their mark was moved)
	Stuck    []StuckPipeline
	Queued   bool
}

// DueResult is what one batch of the due pass did.
type DueResult struct {
	Checked  int // due builds locked
	Enqueued int // moved to pending
	// Pipelines advanced, one entry each.
	Pipelines []int64
}

// ReapParams holds the reapers' thresholds.
type ReapParams struct {
	Now            time.Time
	NoUpdates      time.Duration // running without any update → no_updates_running
	ExecutionGrace time.Duration // running past timeout + grace → job_execution_timeout
	Pending        time.Duration // pending this long → stuck_pending
	Canceling      time.Duration // canceling without updates → canceled
	Batch          int
	Policy         RetryPolicy
}

// ReapResult counts what the reapers did.
type ReapResult struct {
	NoUpdates        int
	ExecutionTimeout int
	StuckPending     int
	Canceled         int
	Retried          int
	Pipelines        []int64
	Queued           bool
	// Ended lists the builds taken from their runners (running or canceling before), with
	// the status they ended in: their live logs are closed (Service.LogsEnded).
	Ended []Build
}

// TraceChunk is a stored piece of a log and where it starts.
type TraceChunk struct {
	Offset int64
	Data   []byte
}

// TraceRangeError says the runner's offset is not where the stored trace ends.
type TraceRangeError struct{ Size int64 }

func (e *TraceRangeError) Error() string { return "trace offset does not match stored size" }

// Leases holds the ack TTL keys (Redis). Values identify the runner manager.
type Leases interface {
	// Grant sets the ack key for a fresh assignment.
	Grant(ctx context.Context, buildID int64, holder string, ttl time.Duration) error
	// Refresh extends a live key (keep-alive), recreating it if it vanished.
	Refresh(ctx context.Context, buildID int64, holder string, ttl time.Duration) error
	Release(ctx context.Context, buildID int64) error
	// TTLs returns the time left of each live key; missing keys are absent from the map.
	TTLs(ctx context.Context, buildIDs []int64) (map[int64]time.Duration, error)
}

// Queue carries the queue version that answers idle polls without Postgres.
type Queue interface {
	// Version returns the current queue version ("" if none is set).
	Version(ctx context.Context) (string, error)
	// Bump sets a new version: every runner's next poll goes to Postgres.
	Bump(ctx context.Context) error
}

// TraceWatch remembers for a few seconds that someone reads a build's log, so that the
// runner is told to send it more often (GitLab's WATCH_FLAG_TTL).
type TraceWatch interface {
	Watch(ctx context.Context, buildID int64) error
	Watched(ctx context.Context, buildID int64) (bool, error)
}

// AuditEvent is one operator action: who did what to which object.
type AuditEvent struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Target string         `json:"target"`
	Detail map[string]any `json:"detail"`
}

// AuditLog records operator actions (Postgres); package builds/auditlog reads them.
type AuditLog interface {
	AddAudit(ctx context.Context, e AuditEvent) error
}
