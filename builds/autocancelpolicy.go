package builds

// workflow:auto_cancel values (GitLab's). OnNewCommit decides what a newer pipeline on the
// same ref does to this one; OnJobFailure what a failing job does to the rest of it.
const (
	// AutoCancelConservative (the default): the pipeline is canceled whole, but only if none
	// of its started jobs is uninterruptible.
	AutoCancelConservative = "conservative"
	// AutoCancelInterruptible: only its interruptible jobs are canceled, even when
	// uninterruptible ones have started (those run on).
	AutoCancelInterruptible = "interruptible"
	// AutoCancelNone: a newer pipeline never cancels it; as on_job_failure (the default), a
	// failure cancels nothing.
	AutoCancelNone = "none"
	// AutoCancelAll (on_job_failure): a job that fails (not allowed to, and not retried)
	// cancels the pipeline's other jobs at once.
	AutoCancelAll = "all"
)

// AutoCancel is a pipeline's workflow:auto_cancel; "" fields mean GitLab's defaults.
type AutoCancel struct {
	OnNewCommit  string
	OnJobFailure string
}

// normalize fills GitLab's defaults and refuses other values.
func (a *AutoCancel) normalize() error {
	switch a.OnNewCommit {
	case "":
		a.OnNewCommit = AutoCancelConservative
	case AutoCancelConservative, AutoCancelInterruptible, AutoCancelNone:
	default:
		return invalid("auto_cancel on_new_commit must be one of: conservative, interruptible, none")
	}
	switch a.OnJobFailure {
	case "":
		a.OnJobFailure = AutoCancelNone
	case AutoCancelNone, AutoCancelAll:
	default:
		return invalid("auto_cancel on_job_failure must be one of: none, all")
	}
	return nil
}
