package builds

import "time"

// ExpiredAck is a waiting build whose deadline of record passed, as the sweeper found it.
type ExpiredAck struct {
	ID            int64
	AssignedAt    time.Time
	RunnerManager string
	// TTL and Alive: what is left of its ack key, when one still lives.
	TTL   time.Duration
	Alive bool
}

// AckAction is what the sweeper does with one expired ack.
type AckAction int

const (
	// AckSkip: Redis could not be asked; the build waits for the next sweep.
	AckSkip AckAction = iota
	// AckExtend: a keep-alive holds the key; move the deadline of record.
	AckExtend
	// AckFail: fail the build with runner_provisioning_timeout.
	AckFail
)

// AckDecision is the sweeper's choice for one candidate.
type AckDecision struct {
	Action AckAction
	// Deadline is the new deadline of record (AckExtend).
	Deadline time.Time
	// Finish is the change to make (AckFail).
	Finish Finish
}

// DecideExpiredAck chooses, for one candidate of the sweep p, between extending and
// failing. leasesKnown is false when Redis failed: a kept-alive build cannot then be told
// from an abandoned one, so only builds past the max provisioning wait are failed.
func DecideExpiredAck(p SweepParams, c ExpiredAck, leasesKnown bool) AckDecision {
	waited := p.Now.Sub(c.AssignedAt)
	overMax := p.MaxWait > 0 && waited >= p.MaxWait
	if !leasesKnown && !overMax {
		return AckDecision{Action: AckSkip}
	}
	if c.Alive && !overMax {
		deadline := p.Now.Add(c.TTL)
		if p.MaxWait > 0 && deadline.After(c.AssignedAt.Add(p.MaxWait)) {
			deadline = c.AssignedAt.Add(p.MaxWait)
		}
		return AckDecision{Action: AckExtend, Deadline: deadline}
	}
	cause := "ack key expired"
	if overMax {
		cause = "max provisioning wait exceeded"
	}
	policy := p.Policy
	return AckDecision{Action: AckFail, Finish: Finish{
		BuildID: c.ID, From: []Status{StatusWaiting}, To: StatusFailed,
		Reason: ReasonRunnerProvisioningTimeout, Event: EventAckTimeout,
		RunnerManager: c.RunnerManager, Now: p.Now, Policy: &policy, AckDeadlineBy: p.Now,
		Detail: map[string]any{"cause": cause, "waited_seconds": waited.Seconds()},
	}}
}
