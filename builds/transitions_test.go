package builds

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStateMachineDocMatchesCode: the table of docs/state-machine.md and doc.go's are
// TransitionTable(), so the documentation cannot drift from the table the store checks against.
func TestStateMachineDocMatchesCode(t *testing.T) {
	want := TransitionTable()
	readme, err := os.ReadFile("../docs/state-machine.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- transitions -->\n```text\n")
	got, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatal("docs/state-machine.md has no <!-- transitions --> block")
	}
	if got != want {
		t.Errorf("docs/state-machine.md's transition table differs from builds.TransitionTable(); paste this:\n%s", want)
	}

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(doc), "\n") {
		text, isTable := strings.CutPrefix(l, "//\t")
		switch {
		case isTable && strings.HasPrefix(text, "build from"):
			in = true
		case !in:
			continue
		case l == "//":
			text = ""
		case !isTable:
			in = false
			continue
		}
		lines = append(lines, text)
	}
	if got := strings.Join(lines, "\n") + "\n"; strings.TrimRight(got, "\n")+"\n" != want {
		t.Errorf("doc.go's transition table differs from builds.TransitionTable():\n%s", got)
	}
}

func TestCheckTransition(t *testing.T) {
	tests := []struct {
		from, to      Status
		event, reason string
		ok            bool
	}{
		{StatusPending, StatusRunning, EventAssigned, "", true},
		{StatusWaiting, StatusFailed, EventDeclined, ReasonScriptFailure, true},
		{StatusWaiting, StatusFailed, EventDeclined, "", false}, // the service fills the default
		{StatusRunning, StatusFailed, EventFinished, ReasonUnknownFailure, true},
		{StatusRunning, StatusSuccess, EventFinished, "", true},
		{StatusCanceling, StatusCanceled, EventFinished, "", true},
		{StatusCanceling, StatusFailed, EventTraceExceeded, ReasonTraceSizeExceeded, true},
		{StatusWaiting, StatusWaiting, EventKeepalive, "", true},
		{StatusRunning, StatusFailed, EventDroppedStuck, ReasonStuckPending, false}, // the pending reaper's reason
		{StatusPending, StatusSuccess, EventFinished, "", false},
		{StatusSuccess, StatusRunning, EventFinished, "", false},
		{StatusCreated, StatusCanceled, EventCanceled, "", true},
		{StatusSkipped, StatusCreated, EventReopened, "", true},
	}
	for _, tt := range tests {
		err := CheckTransition(tt.from, tt.to, tt.event, tt.reason)
		var te *TransitionError
		if tt.ok && err != nil || !tt.ok && !errors.As(err, &te) {
			t.Errorf("CheckTransition(%s, %s, %s, %q) = %v, want ok=%t", tt.from, tt.to, tt.event, tt.reason, err, tt.ok)
		}
	}
	if err := CheckPipelineTransition(PipelineSuccess, PipelineFailed); err == nil {
		t.Error("pipeline success → failed is not declared, yet allowed")
	}
	if err := CheckPipelineTransition(PipelineFailed, PipelineRunning); err != nil {
		t.Errorf("pipeline failed → running (operator retry): %v", err)
	}
}

// Every Finish the decisions produce is declared: the reapers, the sweeper, the stuck
// check, from every state they may find a build in.
func TestDecisionsStayInTheTable(t *testing.T) {
	now := time.Now()
	var finishes []Finish
	for _, r := range (ReapParams{NoUpdates: time.Hour, ExecutionGrace: time.Hour, Pending: time.Hour, Canceling: time.Hour}).Rules() {
		finishes = append(finishes, r.Finish(1, now, DefaultRetryPolicy(2)))
	}
	d := DecideExpiredAck(SweepParams{Now: now}, ExpiredAck{ID: 1, AssignedAt: now.Add(-time.Hour)}, true)
	if d.Action != AckFail {
		t.Fatalf("expired ack without a key: action %v, want AckFail", d.Action)
	}
	finishes = append(finishes, d.Finish)
	stuck := []StuckBuild{{ID: 1, Status: StatusPending}, {ID: 2, Status: StatusWaiting},
		{ID: 3, Status: StatusRunning}, {ID: 4, Status: StatusCanceling}}
	finishes = append(finishes, PlanStuckStage(TimeoutPessimistic, stuck, nil, now).Finish...)
	for _, f := range finishes {
		if err := f.Check(); err != nil {
			t.Error(err)
		}
	}
	if p := PlanStuckStage(TimeoutOptimistic, stuck, nil, now); !p.MoveOn || len(p.Finish) != 0 {
		t.Errorf("optimistic plan %+v, want MoveOn and no finishes", p)
	}
	for _, twoPhase := range []bool{false, true} {
		if err := CheckTransition(StatusPending, AssignedStatus(twoPhase), EventAssigned, ""); err != nil {
			t.Error(err)
		}
	}
}

func TestDecideExpiredAck(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := SweepParams{Now: now, MaxWait: time.Hour, Policy: DefaultRetryPolicy(2)}
	recent, old := now.Add(-10*time.Minute), now.Add(-2*time.Hour)
	tests := []struct {
		name        string
		c           ExpiredAck
		leasesKnown bool
		want        AckAction
		deadline    time.Time
		cause       string
	}{
		{"key alive: extend by its ttl", ExpiredAck{AssignedAt: recent, TTL: time.Minute, Alive: true}, true, AckExtend, now.Add(time.Minute), ""},
		{"key alive, capped at max wait", ExpiredAck{AssignedAt: now.Add(-59 * time.Minute), TTL: 5 * time.Minute, Alive: true}, true, AckExtend, now.Add(time.Minute), ""},
		{"key gone: fail", ExpiredAck{AssignedAt: recent}, true, AckFail, time.Time{}, "ack key expired"},
		{"past max wait though alive: fail", ExpiredAck{AssignedAt: old, TTL: time.Minute, Alive: true}, true, AckFail, time.Time{}, "max provisioning wait exceeded"},
		{"redis down: wait for it", ExpiredAck{AssignedAt: recent}, false, AckSkip, time.Time{}, ""},
		{"redis down, past max wait: fail", ExpiredAck{AssignedAt: old}, false, AckFail, time.Time{}, "max provisioning wait exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideExpiredAck(p, tt.c, tt.leasesKnown)
			if d.Action != tt.want || !d.Deadline.Equal(tt.deadline) {
				t.Fatalf("got action %v deadline %v, want %v %v", d.Action, d.Deadline, tt.want, tt.deadline)
			}
			if tt.want == AckFail && (d.Finish.Detail["cause"] != tt.cause || d.Finish.Reason != ReasonRunnerProvisioningTimeout) {
				t.Errorf("finish %+v, want cause %q", d.Finish, tt.cause)
			}
		})
	}
}

func TestDecideAutoRetry(t *testing.T) {
	policy := DefaultRetryPolicy(2)
	failed := func(attempt int, rule RetryRule) Build {
		return Build{Status: StatusFailed, Attempt: attempt, Payload: Payload{Retry: rule}}
	}
	tests := []struct {
		name string
		f    Finish
		b    Build
		want RetryDecision
	}{
		{"provisioning timeout retried", Finish{Reason: ReasonRunnerProvisioningTimeout, Policy: &policy}, failed(1, RetryRule{}), RetryDecision{Retry: true, Limit: 2}},
		{"provisioning budget spent", Finish{Reason: ReasonRunnerProvisioningTimeout, Policy: &policy}, failed(3, RetryRule{}), RetryDecision{Exhausted: true, Limit: 2}},
		{"script failure, no budget", Finish{Reason: ReasonScriptFailure, Policy: &policy}, failed(1, RetryRule{}), RetryDecision{}},
		{"decline paid by the provisioning budget", Finish{Reason: ReasonScriptFailure, AlsoRetryAs: ReasonRunnerProvisioningTimeout, Policy: &policy}, failed(1, RetryRule{}), RetryDecision{Retry: true, Limit: 2}},
		{"job's when names the reason", Finish{Reason: ReasonScriptFailure, Policy: &policy}, failed(1, RetryRule{Max: 1, When: []string{ReasonScriptFailure}}), RetryDecision{Retry: true, Limit: 1}},
		{"no policy: never", Finish{Reason: ReasonRunnerProvisioningTimeout}, failed(1, RetryRule{}), RetryDecision{}},
		{"already retried", Finish{Reason: ReasonRunnerProvisioningTimeout, Policy: &policy}, Build{Status: StatusFailed, Attempt: 1, RetriedBy: 9}, RetryDecision{}},
		{"canceled is not retried", Finish{Policy: &policy}, Build{Status: StatusCanceled, Attempt: 1}, RetryDecision{}},
	}
	for _, tt := range tests {
		if got := DecideAutoRetry(tt.f, tt.b); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
