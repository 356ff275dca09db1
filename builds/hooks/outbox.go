package hooks

import (
	"context"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/forgestatus"
)

// Touched is a build that an event of build_events says changed.
type Touched struct {
	EventID    int64
	BuildID    int64
	PipelineID int64
	ProjectID  int64
}

// Targets are where a project's events go: its hooks and its forge (nil: none).
type Targets struct {
	Hooks []TargetHook
	Forge *TargetForge
}

// TargetHook is a hook and the last event before it was created.
type TargetHook struct {
	Hook
	SinceEventID int64
}

// TargetForge is a project's forge status settings and the last event before they were set.
type TargetForge struct {
	forgestatus.Settings
	SinceEventID int64
}

// Cursor is how far the event pass has read build_events (see scan.go).
type Cursor struct {
	SafeID int64
	SeenID int64
	SeenAt time.Time
}

// Scan is what one read of build_events found.
type Scan struct {
	Cursor Cursor
	// Now is the database's clock, the one every replica's pass shares.
	Now time.Time
	// HeadID is the highest event id visible when the pass read (0: none at all).
	HeadID int64
	// Events are those of projects with targets after Cursor.SafeID, oldest first.
	Events []Touched
	// Targets of the projects of Events; AnyTargets: some project has one.
	Targets    map[int64]Targets
	AnyTargets bool
}

// Claimed is a due delivery a worker holds until its lease ends: its target as it is now
// (a hook edited since the event sends to its new URL).
type Claimed struct {
	Delivery
	Hook  *Hook
	Forge *forgestatus.Settings
}

// Outbox is the deliveries' store: the event pass writes into it, the workers send from it.
type Outbox interface {
	// ScanHookEvents reads up to limit events after the cursor, of projects with targets.
	ScanHookEvents(ctx context.Context, limit int) (Scan, error)
	// EnqueueHookDeliveries writes the deliveries that are not there yet (by project, target and key)
	// and moves the cursor from old to next, in one transaction; a cursor another replica
	// moved meanwhile stays where it is.
	EnqueueHookDeliveries(ctx context.Context, ds []Delivery, old, next Cursor) (int, error)
	// ClaimHookDeliveries takes up to limit due deliveries for this worker: each one's attempt count
	// goes up and its next attempt moves to now+lease, in one statement that skips rows
	// another replica is claiming.
	ClaimHookDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Claimed, error)
	// RecordHookAttempt logs an attempt and sets its delivery's state and next attempt, unless
	// the delivery moved on meanwhile (its lease ended and another worker took it).
	RecordHookAttempt(ctx context.Context, a Attempt, state string, next time.Time) error
	// RecordHookResult counts a delivery's outcome for the hook (see disable.go): ok resets
	// the count and re-enables it; a failure, unless the hook is already disabled at now,
	// adds one and disables it for disableFor(failures) from now when that is not 0.
	RecordHookResult(ctx context.Context, hookID int64, ok bool, now time.Time, disableFor func(failures int) time.Duration) error
	// AddHookDelivery writes one delivery whatever its key (a test delivery) and returns it
	// claimed, attempt 1 under way.
	AddHookDelivery(ctx context.Context, d Delivery) (Claimed, error)
	// PruneHookDeliveries removes up to limit finished deliveries older than before.
	PruneHookDeliveries(ctx context.Context, before time.Time, limit int) (int, error)
	// Pipeline and Project read what payloads are made of.
	Pipeline(ctx context.Context, projectID, id int64) (builds.Pipeline, error)
	Project(ctx context.Context, id int64) (builds.Project, error)
	// NewestPipeline is the project's newest pipeline (a test delivery's).
	NewestPipeline(ctx context.Context, projectID int64) (builds.Pipeline, error)
}
