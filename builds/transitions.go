package builds

import (
	"fmt"
	"slices"
	"strings"
)

// StatusNew stands for "no row yet" in the transition tables: the From of a build or a
// pipeline being created.
const StatusNew Status = ""

// Transition is one declared change of a build: from one of From, on Trigger, to To, with
// Event appended to the build's history. To == From (an event without a state change) is
// declared as well, so that the table also lists every event. Reason is the failure_reason
// written, ReasonFromRunner when the runner's PUT chooses it, "" when none is written.
type Transition struct {
	From    []Status
	Trigger string
	To      Status
	Event   string
	Reason  string
}

// ReasonFromRunner in a Transition: the reason the runner reported, with a default.
const ReasonFromRunner = "(runner's)"

// BuildTransitions declares every state change of a build. The Store checks each Finish
// and claim against it, a pgstore test checks every status its SQL writes, and a test keeps
// docs/state-machine.md's copy equal to TransitionTable().
var BuildTransitions = []Transition{
	{From: []Status{StatusNew}, Trigger: "pipeline created, nothing to wait for¹", To: StatusPending, Event: EventQueued},
	{From: []Status{StatusNew}, Trigger: "pipeline created, waits for its predecessors¹", To: StatusCreated, Event: EventCreated},
	{From: []Status{StatusNew}, Trigger: "pipeline created, when: manual, nothing to wait for", To: StatusManual, Event: EventManual},
	{From: []Status{StatusNew}, Trigger: "pipeline created, when: delayed, nothing to wait for", To: StatusScheduled, Event: EventScheduled},
	{From: []Status{StatusNew}, Trigger: "pipeline created, ruled out at once¹ (on_failure)", To: StatusSkipped, Event: EventSkipped},
	{From: []Status{StatusNew}, Trigger: "pipeline created, a resource_group job⁴, nothing to wait for", To: StatusWaitingForResource, Event: EventWaitingForResource},
	{From: []Status{StatusNew}, Trigger: "retry (auto or operator): the new attempt", To: StatusPending, Event: EventQueued},
	{From: []Status{StatusNew}, Trigger: "retry of a resource_group job⁴: the new attempt", To: StatusWaitingForResource, Event: EventWaitingForResource},
	{From: []Status{StatusNew}, Trigger: "pipeline retry: the new attempt, waiting its turn¹", To: StatusCreated, Event: EventCreated},
	{From: []Status{StatusCreated}, Trigger: "released: its predecessors finished¹", To: StatusPending, Event: EventQueued},
	{From: []Status{StatusCreated}, Trigger: "released, a resource_group job⁴", To: StatusWaitingForResource, Event: EventWaitingForResource},
	{From: []Status{StatusCreated}, Trigger: "released, when: manual", To: StatusManual, Event: EventManual},
	{From: []Status{StatusCreated}, Trigger: "released, when: delayed (at now + start_in)", To: StatusScheduled, Event: EventScheduled},
	{From: []Status{StatusCreated}, Trigger: "ruled out by its predecessors¹", To: StatusSkipped, Event: EventSkipped},
	{From: []Status{StatusManual}, Trigger: "operator plays it (POST …/play)", To: StatusPending, Event: EventPlayed},
	{From: []Status{StatusManual}, Trigger: "operator plays a resource_group job⁴", To: StatusWaitingForResource, Event: EventPlayed},
	{From: []Status{StatusScheduled}, Trigger: "due pass: its scheduled_at passed", To: StatusPending, Event: EventQueued},
	{From: []Status{StatusScheduled}, Trigger: "due pass, a resource_group job⁴", To: StatusWaitingForResource, Event: EventWaitingForResource},
	{From: []Status{StatusWaitingForResource}, Trigger: "its resource group is free and assigned to it⁴", To: StatusPending, Event: EventQueued},
	{From: []Status{StatusCreated, StatusManual, StatusScheduled, StatusWaitingForResource, StatusPending, StatusWaiting}, Trigger: "operator cancels the job or pipeline, or auto-cancel⁶", To: StatusCanceled, Event: EventCanceled},
	{From: []Status{StatusPending}, Trigger: "claimed by a runner, one-phase", To: StatusRunning, Event: EventAssigned},
	{From: []Status{StatusPending}, Trigger: "claimed by a runner, two-phase", To: StatusWaiting, Event: EventAssigned},
	{From: []Status{StatusPending}, Trigger: "reaper: pending too long", To: StatusFailed, Event: EventDroppedStuck, Reason: ReasonStuckPending},
	{From: []Status{StatusPending}, Trigger: "bridge⁵: its child pipeline created, strategy: depend", To: StatusRunning, Event: EventDownstreamCreated},
	{From: []Status{StatusPending}, Trigger: "bridge⁵: its child pipeline created", To: StatusSuccess, Event: EventDownstreamCreated},
	{From: []Status{StatusPending}, Trigger: "bridge⁵: the child's configuration is invalid", To: StatusFailed, Event: EventDownstreamFailed, Reason: ReasonDownstreamCreationFailed},
	{From: []Status{StatusPending}, Trigger: "bridge⁵: its pipeline is nested too deep", To: StatusFailed, Event: EventDownstreamFailed, Reason: ReasonMaxDescendantsDepth},
	{From: []Status{StatusRunning}, Trigger: "bridge⁵, depend: its child succeeded", To: StatusSuccess, Event: EventDownstreamFinished},
	{From: []Status{StatusRunning}, Trigger: "bridge⁵, depend: its child failed", To: StatusFailed, Event: EventDownstreamFinished, Reason: ReasonUnknownFailure},
	{From: []Status{StatusRunning, StatusCanceling}, Trigger: "bridge⁵, depend: its child canceled (or ended while canceling)", To: StatusCanceled, Event: EventDownstreamFinished},
	{From: []Status{StatusPending, StatusWaiting, StatusRunning}, Trigger: "stuck stage², pessimistic", To: StatusFailed, Event: EventStuckStage, Reason: ReasonStuckOrTimeoutFailure},
	{From: []Status{StatusPending, StatusWaiting, StatusRunning, StatusCanceling}, Trigger: "stuck stage², optimistic (left behind)", To: StatusSame, Event: EventStuckStage},
	{From: []Status{StatusWaiting}, Trigger: "runner acks (PUT state=running)", To: StatusRunning, Event: EventAcknowledged},
	{From: []Status{StatusWaiting}, Trigger: "runner keep-alive (PUT state=pending)", To: StatusSame, Event: EventKeepalive},
	{From: []Status{StatusWaiting}, Trigger: "runner declines (PUT state=failed)", To: StatusFailed, Event: EventDeclined, Reason: ReasonFromRunner},
	{From: []Status{StatusWaiting}, Trigger: "ack sweeper: key expired or max wait passed", To: StatusFailed, Event: EventAckTimeout, Reason: ReasonRunnerProvisioningTimeout},
	{From: []Status{StatusWaiting}, Trigger: "ack sweeper: key alive, deadline moved", To: StatusSame},
	{From: []Status{StatusRunning}, Trigger: "final update (PUT state=success)", To: StatusSuccess, Event: EventFinished},
	{From: []Status{StatusRunning}, Trigger: "final update (PUT state=failed)³", To: StatusFailed, Event: EventFinished, Reason: ReasonFromRunner},
	{From: []Status{StatusRunning, StatusCanceling}, Trigger: "runner update or trace (liveness)", To: StatusSame},
	{From: []Status{StatusRunning, StatusCanceling}, Trigger: "trace over the size limit", To: StatusFailed, Event: EventTraceExceeded, Reason: ReasonTraceSizeExceeded},
	{From: []Status{StatusRunning}, Trigger: "reaper: running without updates", To: StatusFailed, Event: EventDroppedStuck, Reason: ReasonNoUpdatesRunning},
	{From: []Status{StatusRunning}, Trigger: "reaper: running past timeout + grace", To: StatusFailed, Event: EventDroppedStuck, Reason: ReasonJobExecutionTimeout},
	{From: []Status{StatusWaiting, StatusRunning}, Trigger: "its runner deleted (operator or unregister)", To: StatusFailed, Event: EventRunnerDeleted, Reason: ReasonRunnerSystemFailure},
	{From: []Status{StatusRunning}, Trigger: "operator cancels the job or pipeline, or auto-cancel⁶", To: StatusCanceling, Event: EventCancelRequested},
	{From: []Status{StatusCanceling}, Trigger: "final update (PUT success or failed)", To: StatusCanceled, Event: EventFinished},
	{From: []Status{StatusCanceling}, Trigger: "operator force-cancels it (POST …/cancel?force=true)", To: StatusCanceled, Event: EventForceCanceled},
	{From: []Status{StatusCanceling}, Trigger: "reaper: canceling without updates", To: StatusCanceled, Event: EventDroppedStuck},
	{From: []Status{StatusCanceling}, Trigger: "stuck stage², pessimistic", To: StatusCanceled, Event: EventStuckStage},
	{From: []Status{StatusCanceling}, Trigger: "its runner deleted", To: StatusCanceled, Event: EventRunnerDeleted},
	{From: []Status{StatusFailed}, Trigger: "auto-retry allowed (new attempt queued)", To: StatusSame, Event: EventRetried},
	{From: []Status{StatusFailed}, Trigger: "auto-retry limit reached", To: StatusSame, Event: EventRetryExhausted},
	{From: []Status{StatusSuccess, StatusFailed, StatusCanceled}, Trigger: "operator retry (new attempt queued)", To: StatusSame, Event: EventRetried},
	{From: []Status{StatusSkipped}, Trigger: "operator retries or plays a job it waits for", To: StatusCreated, Event: EventReopened},
}

// StatusSame as a Transition's To: the build keeps its state (an event, or a moved
// deadline, without a state change).
const StatusSame Status = "(same)"

// PipelineTransition is one declared change of a pipeline's status. Pipelines have no event
// history: a change writes updated_at and progressed_at (finished_at for an end state).
type PipelineTransition struct {
	From    []string
	Trigger string
	To      []string
}

// PipelineNew stands for "no row yet" in PipelineTransitions.
const PipelineNew = ""

// PipelineTransitions declares every change of a pipeline's status. After the claim, each
// is PipelineStatus applied to the pipeline's latest attempts (see Advance).
var PipelineTransitions = []PipelineTransition{
	{From: []string{PipelineNew}, Trigger: "pipeline created", To: []string{PipelinePending}},
	{From: []string{PipelinePending}, Trigger: "a build assigned; or one ended, others left", To: []string{PipelineRunning}},
	{From: []string{PipelineRunning}, Trigger: "its only started build retried, none ended", To: []string{PipelinePending}},
	{From: []string{PipelinePending, PipelineRunning, PipelineScheduled}, Trigger: "nothing runs, a blocking manual job waits", To: []string{PipelineManual}},
	{From: []string{PipelinePending, PipelineRunning, PipelineManual}, Trigger: "nothing runs, a delayed job waits", To: []string{PipelineScheduled}},
	{From: []string{PipelineManual, PipelineScheduled}, Trigger: "a job played, come due or retried", To: []string{PipelinePending, PipelineRunning}},
	{From: []string{PipelinePending, PipelineRunning, PipelineManual, PipelineScheduled}, Trigger: "all latest attempts ended, all succeeded*", To: []string{PipelineSuccess}},
	{From: []string{PipelinePending, PipelineRunning, PipelineManual, PipelineScheduled}, Trigger: "all ended, one failed (no allow_failure)", To: []string{PipelineFailed}},
	{From: []string{PipelinePending, PipelineRunning, PipelineManual, PipelineScheduled}, Trigger: "all ended, one canceled, none failed*", To: []string{PipelineCanceled}},
	{From: []string{PipelineSuccess, PipelineFailed, PipelineCanceled}, Trigger: "operator retries or plays one of its builds", To: []string{PipelinePending, PipelineRunning}},
}

// TransitionError: code tried a state change that BuildTransitions or PipelineTransitions
// does not declare. It is a bug; the store refuses the change so that the state of record
// never leaves the table.
type TransitionError struct {
	Kind     string // "build" or "pipeline"
	From, To string
	Event    string
	Reason   string
}

func (e *TransitionError) Error() string {
	if e.Kind == "pipeline" {
		return fmt.Sprintf("undeclared pipeline transition %s → %s", showStatus(e.From), showStatus(e.To))
	}
	return fmt.Sprintf("undeclared build transition %s → %s (event %q, reason %q)",
		showStatus(e.From), showStatus(e.To), e.Event, e.Reason)
}

// CheckTransition reports whether a build may move from → to recording event with
// reason; an empty event matches rows that record none. A *TransitionError when not.
func CheckTransition(from, to Status, event, reason string) error {
	for _, t := range BuildTransitions {
		if !slices.Contains(t.From, from) || t.Event != event {
			continue
		}
		target := t.To
		if target == StatusSame {
			target = from
		}
		if target != to {
			continue
		}
		if t.Reason == reason || t.Reason == ReasonFromRunner && (to != StatusFailed || reason != "") {
			return nil
		}
	}
	return &TransitionError{Kind: "build", From: string(from), To: string(to), Event: event, Reason: reason}
}

// EventStatuses lists the states in which BuildTransitions lets event be recorded without
// a state change (rows whose To is StatusSame): the only states in which the Store appends
// it on its own (AddEvent). Nil for an event that only ever comes with a state change.
func EventStatuses(event string) []Status {
	var out []Status
	for _, t := range BuildTransitions {
		if t.To != StatusSame || t.Event != event || event == "" {
			continue
		}
		for _, from := range t.From {
			if !slices.Contains(out, from) {
				out = append(out, from)
			}
		}
	}
	return out
}

// Check reports whether every From of f to f.To is declared (see CheckTransition).
func (f Finish) Check() error {
	for _, from := range f.From {
		if err := CheckTransition(from, f.To, f.Event, f.Reason); err != nil {
			return err
		}
	}
	return nil
}

// CheckPipelineTransition reports whether a pipeline may move from → to. Staying is
// always allowed.
func CheckPipelineTransition(from, to string) error {
	if from == to {
		return nil
	}
	for _, t := range PipelineTransitions {
		if slices.Contains(t.From, from) && slices.Contains(t.To, to) {
			return nil
		}
	}
	return &TransitionError{Kind: "pipeline", From: from, To: to}
}

func showStatus(s string) string {
	switch Status(s) {
	case StatusNew:
		return "(new)"
	case StatusWaiting:
		return "waiting" // the legend under the table spells it out
	case StatusWaitingForResource:
		return "resource"
	}
	return s
}

func joinStatuses[S ~string](ss []S) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = showStatus(string(s))
	}
	return strings.Join(parts, ", ")
}

// The legends under the tables: what the abbreviations and footnotes of the rows say.
const (
	buildLegend = `waiting = waiting_for_runner_ack; resource = waiting_for_resource; (same): no state
change; (runner's): the PUT's failure_reason, else unknown_failure (final update) or
runner_system_failure (decline).
¹ Predecessors: the jobs it needs (needs:), else every job of the earlier stages. As in
GitLab, on_success, manual and delayed jobs run once they succeeded (a stage job also
when they were skipped), on_failure ones once one failed, always ones unless one was
canceled; others are skipped, and so is a DAG job one of whose needs was skipped or is
an optional manual job not played. A failure with allow_failure is a success here.
² Stuck: a pending or running pipeline none of whose builds changed state for the
stuck timeout. It waits for the unfinished builds of its first unfinished stage, or in a
pipeline with needs or when for every pending, waiting, running or canceling build not
left behind, whatever its stage. Manual and scheduled builds are never waited for, and
a pipeline in status manual or scheduled is never stuck: a delayed job counts once its
time has come and it is pending.
³ An exit code listed in allow_failure: exit_codes sets the build's allow_failure.
⁴ A job with resource_group holds its group from pending until it ends (pending,
waiting, running, canceling: a unique index allows one such build per group), across
the project's pipelines. Whatever frees a group (an end by any path, a cancel) assigns
it in the same transaction to the next job of its process_mode: unordered, the longest
waiting; oldest_first and newest_first, the first upcoming job (created, scheduled or
waiting) by pipeline id up or down, if it is waiting; newest_ready_first, the waiting
job of the newest pipeline. A pass on every replica assigns free groups left behind.
⁵ A bridge (trigger:) never goes to a runner: the bridge pass creates its child pipeline,
and the transaction that ends the child ends a depend bridge. The reapers and the stuck
check leave a running bridge alone; cancelling its pipeline cancels the child.
⁶ Auto-cancel (workflow:auto_cancel) takes the operator's pipeline cancel path: a newer
pipeline on the ref cancels an older one whole (on_new_commit: conservative) or its
interruptible builds (interruptible); a build that fails for good cancels the rest of its
pipeline (on_job_failure: all) right after its finish commits, a pass being the net.

`
	pipelineLegend = `* allow_failure failures count as succeeded, optional manual jobs (allow_failure) not
played as nothing. Pipelines record no events: a change writes updated_at and
progressed_at, and finished_at when it ends.
`
)

// TransitionTable renders both tables as aligned text: docs/state-machine.md and doc.go carry it.
func TransitionTable() string {
	rows := [][]string{{"build from", "trigger", "to", "event", "failure_reason"}}
	for _, t := range BuildTransitions {
		rows = append(rows, []string{joinStatuses(t.From), t.Trigger, showStatus(string(t.To)), orDash(t.Event), orDash(t.Reason)})
	}
	var b strings.Builder
	renderRows(&b, rows)
	b.WriteString(buildLegend)
	rows = [][]string{{"pipeline from", "trigger", "to"}}
	for _, t := range PipelineTransitions {
		rows = append(rows, []string{joinStatuses(t.From), t.Trigger, joinStatuses(t.To)})
	}
	renderRows(&b, rows)
	b.WriteString(pipelineLegend)
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func renderRows(b *strings.Builder, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for n, r := range rows {
		line := ""
		for i, c := range r {
			if i < len(r)-1 {
				c += strings.Repeat(" ", widths[i]-len([]rune(c))) + " | "
			}
			line += c
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		if n == 0 {
			sep := ""
			for i, w := range widths {
				sep += strings.Repeat("-", w)
				if i < len(widths)-1 {
					sep += "-+-"
				}
			}
			b.WriteString(sep + "\n")
		}
	}
}
