package api

import "time"

// Trigger is a pipeline trigger token (GitLab's /projects/:id/triggers). Token is whole only
// in the answer to its creation; afterwards it is the token's last four characters.
type Trigger struct {
	ID          int64      `json:"id"`
	Description string     `json:"description"`
	Token       string     `json:"token"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	LastUsed    *time.Time `json:"last_used"`
	// Owner is who created it (null for a token older than the record).
	Owner     *User   `json:"owner"`
	ExpiresAt *string `json:"expires_at"`
}

// PipelineSchedule is a pipeline schedule (GitLab's /projects/:id/pipeline_schedules).
// LastPipeline and Variables are in the answer for one schedule, not in lists.
type PipelineSchedule struct {
	ID           int64     `json:"id"`
	Description  string    `json:"description"`
	Ref          string    `json:"ref"`
	Cron         string    `json:"cron"`
	CronTimezone string    `json:"cron_timezone"`
	NextRunAt    time.Time `json:"next_run_at"`
	Active       bool      `json:"active"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// Owner is who created it (null for a schedule older than the record).
	Owner        *User                      `json:"owner"`
	LastPipeline *ScheduleLastPipeline      `json:"last_pipeline,omitempty"`
	Variables    []PipelineScheduleVariable `json:"variables,omitempty"`
}

// ScheduleLastPipeline is the pipeline a schedule started last.
type ScheduleLastPipeline struct {
	ID     int64  `json:"id"`
	SHA    string `json:"sha"`
	Ref    string `json:"ref"`
	Status string `json:"status"`
}

// PipelineScheduleVariable is a schedule's variable.
type PipelineScheduleVariable struct {
	Key          string `json:"key"`
	Value        string `json:"value"`
	VariableType string `json:"variable_type"`
}
