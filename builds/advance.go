package builds

// StageTally counts the latest attempts of one stage by what they mean for advancement
// (SPEC §6).
type StageTally struct {
	// Idx is the stage's position in the pipeline.
	Idx int

	Created, Active, Started, Succeeded, FailedAllowed, FailedBlocking, Canceled, Skipped int
	// Manual counts manual jobs that block (allow_failure false); optional ones count
	// nowhere, as GitLab ignores them. Scheduled counts delayed jobs waiting for their time.
	// Only pipelines that advance job by job have either.
	Manual, Scheduled int
}

// Add counts n latest attempts in status st.
func (t *StageTally) Add(st Status, allowFailure bool, n int) {
	switch st {
	case StatusCreated:
		t.Created += n
	case StatusPending, StatusWaitingForResource:
		t.Active += n
	case StatusWaiting, StatusRunning, StatusCanceling:
		t.Active += n
		t.Started += n
	case StatusSuccess:
		t.Succeeded += n
	case StatusFailed:
		if allowFailure {
			t.FailedAllowed += n
		} else {
			t.FailedBlocking += n
		}
	case StatusCanceled:
		t.Canceled += n
	case StatusSkipped:
		t.Skipped += n
	case StatusManual:
		if !allowFailure {
			t.Manual += n
		}
	case StatusScheduled:
		t.Scheduled += n
	}
}

func (t StageTally) blocks() bool { return t.FailedBlocking > 0 || t.Canceled > 0 }

// PipelineStatus derives a pipeline's status from its stages' latest attempts. An optional
// manual job (allow_failure) counts for nothing: a pipeline whose other jobs ended can
// succeed with it still waiting to be played.
func PipelineStatus(stages []StageTally) string {
	var t StageTally
	for _, st := range stages {
		t.Created += st.Created
		t.Active += st.Active
		t.Started += st.Started
		t.Succeeded += st.Succeeded
		t.FailedAllowed += st.FailedAllowed
		t.FailedBlocking += st.FailedBlocking
		t.Canceled += st.Canceled
		t.Skipped += st.Skipped
		t.Manual += st.Manual
		t.Scheduled += st.Scheduled
	}
	// A skipped job shows no progress (GitLab: pending, or running once one started or ran).
	finished := t.Succeeded + t.FailedAllowed + t.FailedBlocking + t.Canceled
	switch {
	case t.Active > 0 && (t.Started > 0 || finished > 0):
		return PipelineRunning
	case t.Active > 0:
		return PipelinePending
	case t.Manual > 0:
		// Nothing runs: a blocking manual job holds the rest (GitLab's order: manual
		// before scheduled).
		return PipelineManual
	case t.Scheduled > 0:
		return PipelineScheduled
	case t.Created > 0:
		return PipelinePending
	case t.FailedBlocking > 0:
		return PipelineFailed
	case t.Canceled > 0:
		return PipelineCanceled
	default:
		return PipelineSuccess
	}
}

// NoStage in an AdvancePlan: nothing to release, or nothing to skip.
const NoStage = -1

// AdvancePlan is what a pipeline's stages call for after one of its builds changed: at most
// one of the two is set.
type AdvancePlan struct {
	// Release is the stage whose created builds become pending.
	Release int
	// SkipFrom: every created build of this stage and later ones becomes skipped.
	SkipFrom int
}

// PlanAdvance applies SPEC §6 to stages (the latest attempts, in stage order): release the
// next stage when every latest attempt of the current one is finished (success, or failed
// with allow_failure), and skip what follows a blocking failure or a cancel. Stages up to
// advancedPast were left behind by the optimistic stuck strategy: their unfinished builds
// do not hold the next stage back, but a blocking failure in them still stops what follows.
func PlanAdvance(stages []StageTally, advancedPast int) AdvancePlan {
	plan := AdvancePlan{Release: NoStage, SkipFrom: NoStage}
	blocked := false
	for _, st := range stages {
		if blocked {
			// Skip every created build from here on, even when this stage has none left: it
			// may have been released already (optimistic move past a stuck stage, or a
			// retry of an earlier stage that then failed), with later stages still created.
			plan.SkipFrom = st.Idx
			return plan
		}
		if st.Idx <= advancedPast {
			blocked = st.blocks()
			continue
		}
		if st.Created > 0 {
			if st.Active == 0 {
				plan.Release = st.Idx
			}
			return plan
		}
		if st.Active > 0 {
			return plan
		}
		blocked = st.blocks()
	}
	return plan
}

// InitialStatus is the state a job of a new pipeline starts in: pending in the first stage
// that has jobs, created in the later ones.
func InitialStatus(stageIdx, firstStage int) Status {
	if stageIdx == firstStage {
		return StatusPending
	}
	return StatusCreated
}

// FirstStage is the index of the first stage that has jobs in a normalized definition.
func (d *PipelineDefinition) FirstStage() int {
	first := len(d.Stages)
	for _, j := range d.Jobs {
		first = min(first, d.StageIndex(j.Stage))
	}
	return first
}

// AssignedStatus is where a claimed build goes: waiting for the runner's ack when the
// assignment is two-phase, running otherwise.
func AssignedStatus(twoPhase bool) Status {
	if twoPhase {
		return StatusWaiting
	}
	return StatusRunning
}

// Retryable reports whether an operator may retry a build: a finished one (not skipped)
// that is its job's latest attempt.
func Retryable(st Status, latest bool) bool {
	return latest && (st == StatusFailed || st == StatusCanceled || st == StatusSuccess)
}
