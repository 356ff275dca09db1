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
	CreatedAt   time.Time
	ContactedAt *time.Time
	Managers    []Manager
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
}

// ManagerInfo is what a runner reports about itself on verify and job requests.
type ManagerInfo struct {
	Version      string
	Revision     string
	Platform     string
	Architecture string
	Executor     string
	Shell        string
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
}
