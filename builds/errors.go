package builds

import (
	"errors"
	"fmt"
)

// The service's answers that are not failures of a backend. They carry facts (what was
// wrong, the build's state), not wording: handlers choose each status and message.

// ErrRunnerForbidden: the runner token is unknown (a 403 on runner endpoints).
var ErrRunnerForbidden = errors.New("invalid runner token")

// ValidationError explains what is wrong with a request or a definition; Msg is for the
// client, as it is.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// JobForbiddenError refuses a runner's call on a job (a 403). Status, when set, is the
// build's state, which gitlab-runner reads from Job-Status to abort the job.
type JobForbiddenError struct {
	Cause  ForbiddenCause
	Status Status
}

func (e *JobForbiddenError) Error() string {
	if e.Status == "" {
		return "job forbidden: " + e.Cause.String()
	}
	return fmt.Sprintf("job forbidden: %s (status %s)", e.Cause, e.Status)
}

// ForbiddenCause is why a job call was refused.
type ForbiddenCause int

const (
	// InvalidJobToken: no such build, or the job token is not the one it was assigned with.
	InvalidJobToken ForbiddenCause = iota + 1
	// NotProcessing: a PUT for a build that is no longer on a runner.
	NotProcessing
	// ProvisioningTimedOut: a keepalive past the max provisioning wait.
	ProvisioningTimedOut
	// NotRunning: a trace PATCH for a build that is not running.
	NotRunning
	// TraceTooLarge: the trace outgrew the limit; the build failed.
	TraceTooLarge
	// NotADependency: an artifact download for a job the token's job does not depend on
	// (another pipeline's, or one it does not download from).
	NotADependency
)

func (c ForbiddenCause) String() string {
	switch c {
	case InvalidJobToken:
		return "invalid job token"
	case NotProcessing:
		return "job is not processing on runner"
	case ProvisioningTimedOut:
		return "provisioning took longer than the maximum wait"
	case NotRunning:
		return "job is not running"
	case TraceTooLarge:
		return "trace size exceeded"
	case NotADependency:
		return "not a dependency of the token's job"
	}
	return fmt.Sprintf("ForbiddenCause(%d)", int(c))
}

// NoJobError is the answer to a job request when there is nothing to run (a 204);
// LastUpdate is the queue version, for X-GitLab-Last-Update.
type NoJobError struct{ LastUpdate string }

func (e *NoJobError) Error() string { return "no job" }

// ManagerLimitError refuses a new runner manager (system_id) past the runner's cap.
type ManagerLimitError struct {
	RunnerID int64
	Max      int
}

func (e *ManagerLimitError) Error() string {
	return fmt.Sprintf("runner %d has %d managers, its limit", e.RunnerID, e.Max)
}

func (e *ManagerLimitError) Unwrap() error { return ErrTooManyManagers }
