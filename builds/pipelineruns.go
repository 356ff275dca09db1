package builds

import "time"

// RunPeriod is when one job ran: from Started to Finished (nil: still running).
type RunPeriod struct {
	Started  time.Time
	Finished *time.Time
}

// PipelineRuns is what a pipeline's durations are computed from (views.PipelineDurations):
// the run periods of its latest attempts, and when its first job of any attempt started
// (nil: none has). A listing that leaves the builds out carries them in Pipeline.Runs.
type PipelineRuns struct {
	Periods      []RunPeriod
	FirstStarted *time.Time
}
