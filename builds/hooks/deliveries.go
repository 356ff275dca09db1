package hooks

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// GitLab's X-Gitlab-Event values, and jobapi's name for a commit status sent to a forge.
const (
	EventPipeline    = "Pipeline Hook"
	EventJob         = "Job Hook"
	EventPush        = "Push Hook"
	EventTagPush     = "Tag Push Hook"
	EventForgeStatus = "Commit Status"
)

// Delivery states.
const (
	StatePending   = "pending"   // waiting for its next attempt
	StateDelivered = "delivered" // a 2xx answer
	StateFailed    = "failed"    // given up after the last attempt
)

// ForgeStatusTarget is the target of a project's commit statuses; HookTarget names a hook's.
const ForgeStatusTarget = "forge_status"

// HookTarget is the target (what a delivery's key is unique within) of a hook.
func HookTarget(hookID int64) string { return "hook:" + strconv.FormatInt(hookID, 10) }

// Delivery is one event for one hook (HookID) or for the project's forge (HookID 0).
type Delivery struct {
	ID        int64
	ProjectID int64
	HookID    int64
	Event     string
	// Key makes the delivery once per target: every replica's pass that finds the same
	// event writes the same key, and one row is kept.
	Key           string
	UUID          string // X-Gitlab-Event-UUID
	Payload       json.RawMessage
	State         string
	Attempts      int
	NextAttemptAt time.Time
	CreatedAt     time.Time
	FinishedAt    *time.Time
}

// Attempt is one request of a delivery, as the log keeps it.
type Attempt struct {
	DeliveryID int64
	Attempt    int
	URL        string
	StartedAt  time.Time
	Duration   time.Duration
	// StatusCode is the answer's status (0: no answer: Error says why).
	StatusCode   int
	Error        string
	ResponseBody string
}

// LoggedAttempt is an attempt with the delivery it belongs to.
type LoggedAttempt struct {
	Attempt
	Delivery Delivery
}

// DeliveryLog reads the attempts of deliveries, newest first.
type DeliveryLog interface {
	// HookAttempts lists one page of a hook's attempts and their total; builds.ErrNotFound
	// when the project has no such hook.
	HookAttempts(ctx context.Context, projectID, hookID int64, page builds.Page) ([]LoggedAttempt, int, error)
	// ForgeStatusAttempts lists one page of a project's commit status attempts.
	ForgeStatusAttempts(ctx context.Context, projectID int64, page builds.Page) ([]LoggedAttempt, int, error)
}

// Attempts lists one page of a hook's delivery attempts, newest first.
func (s *Service) Attempts(ctx context.Context, projectID, hookID int64, page builds.Page) ([]LoggedAttempt, int, error) {
	return s.log.HookAttempts(ctx, projectID, hookID, page)
}

// ForgeStatusAttempts lists one page of a project's commit status attempts, newest first.
func (s *Service) ForgeStatusAttempts(ctx context.Context, projectID int64, page builds.Page) ([]LoggedAttempt, int, error) {
	return s.log.ForgeStatusAttempts(ctx, projectID, page)
}

// userAgent is what jobapi's hooks send as User-Agent (GitLab sends GitLab/<version>).
const userAgent = "jobapi-webhook"

// LoggedHeaders are the headers of a delivery's requests as the log shows them: those of
// the event, the hook's secret token never among them.
func LoggedHeaders(d Delivery) map[string]string {
	h := map[string]string{"Content-Type": "application/json", "User-Agent": userAgent}
	if d.Event != EventForgeStatus {
		h["X-Gitlab-Event"] = d.Event
		h["X-Gitlab-Event-UUID"] = d.UUID
		h["Idempotency-Key"] = d.UUID
	}
	return h
}
