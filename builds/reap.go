package builds

import "time"

// Reaper names one of the reapers (SPEC §5).
type Reaper int

const (
	ReapNoUpdates Reaper = iota // running without any update
	ReapExecution               // running past its timeout plus a grace
	ReapPending                 // pending for too long
	ReapCanceling               // canceling without an answer
)

// ReapRule is one reaper's transition and threshold.
type ReapRule struct {
	Reaper Reaper
	Cutoff time.Duration // 0: this reaper is off
	From   Status
	To     Status
	Reason string
}

// Rules lists the reapers in the order they run.
func (p ReapParams) Rules() []ReapRule {
	return []ReapRule{
		{ReapNoUpdates, p.NoUpdates, StatusRunning, StatusFailed, ReasonNoUpdatesRunning},
		{ReapExecution, p.ExecutionGrace, StatusRunning, StatusFailed, ReasonJobExecutionTimeout},
		{ReapPending, p.Pending, StatusPending, StatusFailed, ReasonStuckPending},
		{ReapCanceling, p.Canceling, StatusCanceling, StatusCanceled, ""},
	}
}

// Finish is the change the rule makes to build id, with the auto-retry policy.
func (r ReapRule) Finish(id int64, now time.Time, policy RetryPolicy) Finish {
	return Finish{BuildID: id, From: []Status{r.From}, To: r.To, Reason: r.Reason, Event: EventDroppedStuck,
		Now: now, Policy: &policy,
		Detail: map[string]any{"reaper": r.Reason, "threshold_seconds": r.Cutoff.Seconds()}}
}

// Count is the counter of res that the rule's reaper adds to.
func (r ReapRule) Count(res *ReapResult) *int {
	switch r.Reaper {
	case ReapNoUpdates:
		return &res.NoUpdates
	case ReapExecution:
		return &res.ExecutionTimeout
	case ReapPending:
		return &res.StuckPending
	default:
		return &res.Canceled
	}
}

// StuckPlan is what a stuck stage's timeout strategy calls for (SPEC §6).
type StuckPlan struct {
	// MoveOn (optimistic): record stuck_stage on each build, mark the stage left behind and
	// advance; the builds are left to the reapers.
	MoveOn bool
	// Finish (pessimistic): fail each unfinished build (a canceling one ends canceled).
	Finish []Finish
}

// PlanStuckStage applies strategy to the unfinished builds of a stuck stage.
func PlanStuckStage(strategy string, stuck []StuckBuild, detail map[string]any, now time.Time) StuckPlan {
	if strategy == TimeoutOptimistic {
		return StuckPlan{MoveOn: true}
	}
	plan := StuckPlan{Finish: make([]Finish, len(stuck))}
	for i, b := range stuck {
		to, reason := StatusFailed, ReasonStuckOrTimeoutFailure
		if b.Status == StatusCanceling {
			to, reason = StatusCanceled, ""
		}
		plan.Finish[i] = Finish{BuildID: b.ID, From: []Status{b.Status}, To: to, Reason: reason,
			Event: EventStuckStage, Detail: detail, Now: now}
	}
	return plan
}
