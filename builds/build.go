package builds

import "time"

// Status is a build's state. The values are the strings shown to operators and runners.
type Status string

const (
	StatusCreated Status = "created"
	// StatusManual: a when: manual job its predecessors allow, waiting for an operator to
	// play it. StatusScheduled: a when: delayed job waiting for its scheduled_at.
	StatusManual    Status = "manual"
	StatusScheduled Status = "scheduled"
	// StatusWaitingForResource: a job of a resource_group, released while another job of
	// the group holds it; it becomes pending when the group is assigned to it.
	StatusWaitingForResource Status = "waiting_for_resource"
	StatusPending            Status = "pending"
	StatusWaiting            Status = "waiting_for_runner_ack"
	StatusRunning            Status = "running"
	StatusCanceling          Status = "canceling"
	StatusSuccess            Status = "success"
	StatusFailed             Status = "failed"
	StatusCanceled           Status = "canceled"
	StatusSkipped            Status = "skipped"
)

// AllStatuses lists every state, in lifecycle order.
var AllStatuses = []Status{StatusCreated, StatusManual, StatusScheduled, StatusWaitingForResource, StatusPending, StatusWaiting, StatusRunning,
	StatusCanceling, StatusSuccess, StatusFailed, StatusCanceled, StatusSkipped}

// ParseStatus accepts only known states.
func ParseStatus(s string) (Status, bool) {
	for _, st := range AllStatuses {
		if string(st) == s {
			return st, true
		}
	}
	return "", false
}

// Finished reports whether the build reached an end state.
func (s Status) Finished() bool {
	switch s {
	case StatusSuccess, StatusFailed, StatusCanceled, StatusSkipped:
		return true
	}
	return false
}

// OnRunner reports whether a runner legitimately holds the build.
func (s Status) OnRunner() bool {
	return s == StatusWaiting || s == StatusRunning || s == StatusCanceling
}

// Failure reasons, with GitLab's names.
const (
	ReasonScriptFailure             = "script_failure"
	ReasonRunnerSystemFailure       = "runner_system_failure"
	ReasonJobExecutionTimeout       = "job_execution_timeout"
	ReasonUnknownFailure            = "unknown_failure"
	ReasonStuckOrTimeoutFailure     = "stuck_or_timeout_failure"
	ReasonRunnerProvisioningTimeout = "runner_provisioning_timeout"
	ReasonNoUpdatesRunning          = "no_updates_running"
	ReasonStuckPending              = "stuck_pending"
	ReasonTraceSizeExceeded         = "trace_size_exceeded"
	ReasonRunnerUnsupported         = "runner_unsupported"
	ReasonJobCanceled               = "job_canceled"
	ReasonDataIntegrityFailure      = "data_integrity_failure"
	ReasonImagePullFailure          = "image_pull_failure"
)

// FailureReasons lists the reasons a runner may report; the job JSON advertises them.
var FailureReasons = []string{ReasonScriptFailure, ReasonRunnerSystemFailure,
	ReasonJobExecutionTimeout, ReasonUnknownFailure, ReasonStuckOrTimeoutFailure,
	ReasonRunnerProvisioningTimeout, ReasonNoUpdatesRunning, ReasonStuckPending,
	ReasonTraceSizeExceeded, ReasonRunnerUnsupported, ReasonJobCanceled,
	ReasonDataIntegrityFailure, ReasonImagePullFailure}

// ValidFailureReason reports whether r is a reason jobapi knows.
func ValidFailureReason(r string) bool {
	for _, known := range FailureReasons {
		if r == known {
			return true
		}
	}
	return false
}

// Build is one attempt of one job.
type Build struct {
	ID              int64
	ProjectID       int64
	PipelineID      int64
	Stage           string
	StageIdx        int
	Name            string
	Status          Status
	TokenHash       []byte
	Tags            []string
	Payload         Payload
	TimeoutSeconds  int
	AllowFailure    bool
	RunnerID        int64 // 0 until assigned
	RunnerManagerID int64
	// RunnerSystemID is the assigned manager's system_id ("" when unassigned).
	RunnerSystemID   string
	Attempt          int
	RetryOf          int64 // 0: first attempt
	RetriedBy        int64 // 0: latest attempt
	TwoPhase         bool
	CancelRequested  bool
	FailureReason    string
	ExitCode         *int64
	RunnerFinalState string
	TraceSize        int64
	CreatedAt        time.Time
	QueuedAt         *time.Time
	AssignedAt       *time.Time
	AckDeadline      *time.Time
	StartedAt        *time.Time
	FinishedAt       *time.Time
	UpdatedAt        time.Time
	// ScheduledAt: when a delayed job becomes pending (set once it is scheduled).
	ScheduledAt *time.Time
	// Coverage: what the payload's CoverageRegex found in the log at finish (nil: none).
	Coverage *float64
	// Bridge: a trigger job (Payload.Trigger), never handed to a runner.
	Bridge bool
	// Protected: its pipeline's ref was protected when the pipeline was created (kept, as
	// GitLab's ci_builds.protected); only such builds go to ref_protected runners.
	Protected bool

	// From the pipeline, for the job payload.
	Ref string
	SHA string
}

// Payload is what the runner needs beyond the columns: it is copied to a retry unchanged.
type Payload struct {
	BeforeScript          []string     `json:"before_script,omitempty"`
	Script                []string     `json:"script"`
	AfterScript           []string     `json:"after_script,omitempty"`
	Variables             []Variable   `json:"variables,omitempty"`
	Image                 Image        `json:"image,omitzero"`
	Services              []Image      `json:"services,omitempty"`
	Retry                 RetryRule    `json:"retry"`
	AllowFailure          bool         `json:"allow_failure,omitempty"`
	AllowFailureExitCodes []int        `json:"allow_failure_exit_codes,omitempty"`
	When                  string       `json:"when,omitempty"`
	StartInSeconds        int          `json:"start_in_seconds,omitempty"`
	Needs                 []Need       `json:"needs,omitempty"`
	NeedsDeclared         bool         `json:"needs_declared,omitempty"`
	Dependencies          []string     `json:"dependencies,omitempty"`
	DependenciesDeclared  bool         `json:"dependencies_declared,omitempty"`
	DependsOnStages       bool         `json:"depends_on_stages,omitempty"` // see JobDefinition
	Artifacts             []Artifacts  `json:"artifacts,omitempty"`
	Cache                 []Cache      `json:"cache,omitempty"`
	NodeIndex             int          `json:"node_index,omitempty"`
	NodeTotal             int          `json:"node_total,omitempty"`
	CoverageRegex         string       `json:"coverage_regex,omitempty"`
	Interruptible         bool         `json:"interruptible,omitempty"`
	Environment           *Environment `json:"environment,omitempty"`
	Trigger               *Trigger     `json:"trigger,omitempty"`
	IDTokens              []IDToken    `json:"id_tokens,omitempty"`
}

// PayloadOf is what the store keeps of a job definition beyond its columns.
func PayloadOf(j JobDefinition) Payload {
	return Payload{BeforeScript: j.BeforeScript, Script: j.Script, AfterScript: j.AfterScript,
		Variables: j.Variables, Image: j.Image, Services: j.Services, Retry: j.Retry,
		AllowFailure: j.AllowFailure, AllowFailureExitCodes: j.AllowFailureExitCodes,
		When: j.When, StartInSeconds: j.StartInSeconds, Needs: j.Needs, NeedsDeclared: j.NeedsDeclared,
		Dependencies: j.Dependencies, DependenciesDeclared: j.DependenciesDeclared, DependsOnStages: j.DependsOnStages,
		Artifacts: j.Artifacts, Cache: j.Cache, NodeIndex: j.NodeIndex, NodeTotal: j.NodeTotal,
		CoverageRegex: j.CoverageRegex, Interruptible: j.Interruptible, Environment: j.Environment,
		Trigger: j.Trigger, IDTokens: j.IDTokens}
}

// Variable is a job variable as the operator defined it.
type Variable struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Masked bool   `json:"masked,omitempty"`
	File   bool   `json:"file,omitempty"`
	// Raw: `expand: false` in .gitlab-ci.yml; the runner does not expand $VARS in it.
	Raw bool `json:"raw,omitempty"`
}

// RetryRule is the job's own `retry: {max, when}` from .gitlab-ci.yml.
type RetryRule struct {
	Max       int      `json:"max"`
	When      []string `json:"when,omitempty"`
	ExitCodes []int    `json:"exit_codes,omitempty"`
}

// Event is one entry of a build's append-only history.
type Event struct {
	ID            int64          `json:"id"`
	BuildID       int64          `json:"-"`
	Type          string         `json:"type"`
	At            time.Time      `json:"at"`
	RunnerManager string         `json:"runner_manager"`
	Detail        map[string]any `json:"detail"`
}

// Event types.
const (
	EventCreated         = "created"
	EventQueued          = "queued"
	EventAssigned        = "assigned"
	EventKeepalive       = "keepalive"
	EventAcknowledged    = "acknowledged"
	EventDeclined        = "declined"
	EventAckTimeout      = "ack_timeout"
	EventRetried         = "retried"
	EventRetryExhausted  = "retry_exhausted"
	EventStarted         = "started"
	EventFinished        = "finished"
	EventCancelRequested = "cancel_requested"
	EventCanceled        = "canceled"
	// EventForceCanceled: an operator ended a canceling build without its runner (GitLab's
	// force_cancel).
	EventForceCanceled = "force_canceled"
	EventSkipped       = "skipped"
	EventReopened      = "reopened"
	EventTraceExceeded = "trace_size_exceeded"
	EventDroppedStuck  = "dropped_stuck"
	EventStuckStage    = "stuck_stage"
	EventRunnerDeleted = "runner_deleted"
	EventManual        = "manual"
	EventScheduled     = "scheduled"
	EventPlayed        = "played"
	// EventWaitingForResource: released (or retried, played, come due) into
	// waiting_for_resource; the queued event follows when the group is assigned.
	EventWaitingForResource = "waiting_for_resource"
)

// AllEvents lists every event type.
var AllEvents = []string{EventCreated, EventQueued, EventAssigned, EventKeepalive, EventAcknowledged,
	EventDeclined, EventAckTimeout, EventRetried, EventRetryExhausted, EventStarted, EventFinished,
	EventCancelRequested, EventCanceled, EventSkipped, EventReopened, EventTraceExceeded,
	EventDroppedStuck, EventStuckStage, EventRunnerDeleted, EventManual, EventScheduled, EventPlayed, EventWaitingForResource,
	EventDownstreamCreated, EventDownstreamFailed, EventDownstreamFinished}
