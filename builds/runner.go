package builds

import (
	"encoding/json"
	"slices"
	"time"
)

// Runner is a registered runner (one token, possibly many machines).
type Runner struct {
	ID          int64
	Description string
	Tags        []string
	RunUntagged bool
	Paused      bool
	// AccessLevel is AccessNotProtected or AccessRefProtected ("" reads as not_protected).
	AccessLevel string
	CreatedAt   time.Time
	ContactedAt *time.Time
	Managers    []Manager
	// RegistrationToken: registered with a registration token (POST /runners). Its tokens
	// are glrtr-, as GitLab's, which makes gitlab-runner unregister delete the runner.
	RegistrationToken bool
	// TokenExpiresAt is when the token the runner was found by stops working (a runner
	// read by id: its current token); nil: never.
	TokenExpiresAt *time.Time
}

// Manager is one machine (system_id) using a runner's token.
type Manager struct {
	ID           int64
	RunnerID     int64
	SystemID     string
	Version      string
	Revision     string
	Platform     string
	Architecture string
	Executor     string
	Shell        string
	Features     json.RawMessage
	ContactedAt  time.Time
	// IPAddress is the peer address of the request that last wrote the row.
	IPAddress string
}

// ManagerInfo is what a runner reports about itself on verify and job requests.
type ManagerInfo struct {
	Version      string
	Revision     string
	Platform     string
	Architecture string
	Executor     string
	Shell        string
	// IPAddress is the request's peer address (not reported by the runner).
	IPAddress string
	// Features as reported; a map, not JSON: most job requests never store it (the manager
	// row is written at most once a minute), so it is encoded only then.
	Features map[string]bool
}

// CanRun applies SPEC §4's matching rule: the runner's tags must include all of the
// build's tags, and an untagged build needs run_untagged.
func (r Runner) CanRun(buildTags []string) bool {
	if len(buildTags) == 0 {
		return r.RunUntagged
	}
	for _, t := range buildTags {
		if !slices.Contains(r.Tags, t) {
			return false
		}
	}
	return true
}

// RunnerUpdate carries the fields an operator may change; nil means unchanged.
type RunnerUpdate struct {
	Description *string
	Tags        *[]string
	RunUntagged *bool
	Paused      *bool
	AccessLevel *string
}

// RunnerDeletion removes a runner (an operator's DELETE /runners/:id, or gitlab-runner
// unregister) together with what it holds, in one transaction: the builds it has on its
// machines end (see Finish), the retry policy queues their next attempts for other
// runners, and their pipelines advance. Its pending builds are not its own yet and stay.
type RunnerDeletion struct {
	RunnerID int64
	Actor    string
	Now      time.Time
	Policy   RetryPolicy
}

// HeldBuild is a build on the machines of a runner being deleted.
type HeldBuild struct {
	ID       int64
	Status   Status
	SystemID string
}

// RunnerDeleted is what deleting a runner did to the builds it held.
type RunnerDeleted struct {
	Finished []Finished
	// Queued is true when builds became pending (retries, released stages).
	Queued bool
}

// Finish is the change deleting the runner makes to a build it holds. A waiting or running
// build fails with runner_system_failure: its runner is gone, not its script (GitLab's
// runner_unsupported says "upgrade your runner", which would mislead), and `retry: when:
// runner_system_failure` is how jobs ask to be retried on runner trouble. A waiting build
// never started, so it may also use the provisioning budget, as a decline does. The runner's
// next PUT or PATCH then gets 403 with Job-Status: failed and it aborts the job. A canceling
// build was being canceled anyway: it ends canceled.
func (d RunnerDeletion) Finish(b HeldBuild) Finish {
	f := Finish{BuildID: b.ID, From: []Status{b.Status}, To: StatusFailed, Reason: ReasonRunnerSystemFailure,
		Event: EventRunnerDeleted, RunnerManager: b.SystemID, Now: d.Now, Policy: &d.Policy,
		Detail: map[string]any{"runner_id": d.RunnerID, "actor": d.Actor}}
	switch b.Status {
	case StatusWaiting:
		f.AlsoRetryAs = ReasonRunnerProvisioningTimeout
	case StatusCanceling:
		f.To, f.Reason, f.Policy = StatusCanceled, "", nil
	}
	return f
}
