package api

import (
	"encoding/json"
	"time"
)

// ProjectHook is a project webhook in GitLab's shape (GET /projects/:id/hooks). The token
// is never shown: token_present says whether one is set. The events jobapi has no source
// for (issues, merge requests, notes, wiki pages, deployments, releases…) are always false.
type ProjectHook struct {
	ID                       int64     `json:"id"`
	URL                      string    `json:"url"`
	Name                     string    `json:"name"`
	Description              string    `json:"description"`
	ProjectID                int64     `json:"project_id"`
	PushEvents               bool      `json:"push_events"`
	PushEventsBranchFilter   string    `json:"push_events_branch_filter"`
	BranchFilterStrategy     string    `json:"branch_filter_strategy"`
	TagPushEvents            bool      `json:"tag_push_events"`
	PipelineEvents           bool      `json:"pipeline_events"`
	JobEvents                bool      `json:"job_events"`
	IssuesEvents             bool      `json:"issues_events"`
	ConfidentialIssuesEvents bool      `json:"confidential_issues_events"`
	MergeRequestsEvents      bool      `json:"merge_requests_events"`
	NoteEvents               bool      `json:"note_events"`
	ConfidentialNoteEvents   bool      `json:"confidential_note_events"`
	WikiPageEvents           bool      `json:"wiki_page_events"`
	DeploymentEvents         bool      `json:"deployment_events"`
	ReleasesEvents           bool      `json:"releases_events"`
	EnableSSLVerification    bool      `json:"enable_ssl_verification"`
	TokenPresent             bool      `json:"token_present"`
	AlertStatus              string    `json:"alert_status"` // executable, temporarily_disabled or disabled
	DisabledUntil            *string   `json:"disabled_until"`
	URLVariables             []any     `json:"url_variables"`
	CustomHeaders            []any     `json:"custom_headers"`
	CreatedAt                time.Time `json:"created_at"`
}

// HookEvent is one attempt of a delivery in the log (GET /projects/:id/hooks/:hook_id/events,
// GitLab's webhook events with jobapi's attempt, state and error beside them).
type HookEvent struct {
	// ID is the delivery's: its attempts share it.
	ID      int64  `json:"id"`
	URL     string `json:"url"`
	Trigger string `json:"trigger"` // GitLab's: push_hooks, tag_push_hooks, pipeline_hooks, job_hooks; commit_status
	// RequestHeaders are those sent, the secret token left out.
	RequestHeaders map[string]string `json:"request_headers"`
	RequestData    json.RawMessage   `json:"request_data"`
	ResponseBody   string            `json:"response_body"`
	// ResponseStatus is the answer's status code, or "internal error" when none came.
	ResponseStatus    string  `json:"response_status"`
	ExecutionDuration float64 `json:"execution_duration"` // seconds
	// jobapi's own.
	Attempt   int       `json:"attempt"`
	Error     string    `json:"error"`
	State     string    `json:"state"` // the delivery's: pending, delivered or failed
	EventUUID string    `json:"event_uuid"`
	StartedAt time.Time `json:"started_at"`
}

// ForgeStatus says where a project's commit statuses go (GET /projects/:id/forge_status).
// The token is never shown: token_present says one is set.
type ForgeStatus struct {
	Forge        string    `json:"forge"` // github, gitea or gitlab
	APIURL       string    `json:"api_url"`
	Repository   string    `json:"repository"`
	Context      string    `json:"context"`
	TokenPresent bool      `json:"token_present"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}
