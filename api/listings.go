package api

import "time"

// ListedRunner is a runner in GitLab's runner lists (GET /runners/all,
// /projects/:id/runners) and a job's runner: GitLab's short form, with jobapi's tag_list.
type ListedRunner struct {
	ID          int64  `json:"id"`
	Description string `json:"description"`
	// IPAddress: where the runner's most recently seen manager contacted jobapi from.
	IPAddress string `json:"ip_address"`
	Active    bool   `json:"active"`
	Paused    bool   `json:"paused"`
	// IsShared and RunnerType: every jobapi runner is the instance's.
	IsShared   bool   `json:"is_shared"`
	RunnerType string `json:"runner_type"`
	// Name: the runner program's name, which jobapi does not keep (null).
	Name   *string `json:"name"`
	Online bool    `json:"online"`
	// Status: online, offline, stale or never_contacted, by GitLab's rule.
	Status      string     `json:"status"`
	TagList     []string   `json:"tag_list"`
	CreatedAt   time.Time  `json:"created_at"`
	ContactedAt *time.Time `json:"contacted_at"`
}

// JobPipeline is a job's pipeline, GitLab's short form.
type JobPipeline struct {
	ID        int64     `json:"id"`
	IID       int64     `json:"iid"`
	ProjectID int64     `json:"project_id"`
	Ref       string    `json:"ref"`
	Sha       string    `json:"sha"`
	Status    string    `json:"status"`
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	WebURL    string    `json:"web_url"`
}

// CommitStatus is one job of a pipeline at a commit (GET
// /projects/:id/repository/commits/:sha/statuses), GitLab's shape.
type CommitStatus struct {
	ID           int64      `json:"id"`
	Sha          string     `json:"sha"`
	Ref          string     `json:"ref"`
	Status       string     `json:"status"`
	Name         string     `json:"name"`
	Stage        string     `json:"stage"`
	TargetURL    string     `json:"target_url"`
	Description  *string    `json:"description"`
	CreatedAt    time.Time  `json:"created_at"`
	StartedAt    *time.Time `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at"`
	AllowFailure bool       `json:"allow_failure"`
	Coverage     *float64   `json:"coverage"`
	PipelineID   int64      `json:"pipeline_id"`
	Author       User       `json:"author"`
}

// User is GitLab's user. Until jobapi has users, the admin token's holder is the one user.
type User struct {
	ID        int64   `json:"id"`
	Username  string  `json:"username"`
	Name      string  `json:"name"`
	State     string  `json:"state"`
	Locked    bool    `json:"locked"`
	AvatarURL *string `json:"avatar_url"`
	WebURL    string  `json:"web_url"`
	// CreatedAt: null for the admin token's holder, who was never created.
	CreatedAt *time.Time `json:"created_at"`
	IsAdmin   bool       `json:"is_admin"`
	Bot       bool       `json:"bot"`
}

// Version is GET /version: jobapi's own version and the commit it was built from.
type Version struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
}
