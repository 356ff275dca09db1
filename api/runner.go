package api

import "encoding/json"

// RunnerInfo is the `info` object gitlab-runner sends on verify, job requests and updates.
type RunnerInfo struct {
	Name         string          `json:"name,omitempty"`
	Version      string          `json:"version,omitempty"`
	Revision     string          `json:"revision,omitempty"`
	Platform     string          `json:"platform,omitempty"`
	Architecture string          `json:"architecture,omitempty"`
	Executor     string          `json:"executor,omitempty"`
	Shell        string          `json:"shell,omitempty"`
	Features     map[string]bool `json:"features,omitempty"`
	Config       json.RawMessage `json:"config,omitempty"`
	Labels       json.RawMessage `json:"labels,omitempty"`
}

// VerifyRequest is POST /api/v4/runners/verify.
type VerifyRequest struct {
	Token    string     `json:"token"`
	SystemID string     `json:"system_id"`
	Info     RunnerInfo `json:"info"`
}

// VerifyResponse must carry a non-zero id (gitlab-runner register panics on 0). The expiry
// is null unless tokens expire (JOBAPI_RUNNER_TOKEN_EXPIRES_IN): a date makes the runner
// reset its token at 75 % of the lifetime.
type VerifyResponse struct {
	ID             int64   `json:"id"`
	Token          string  `json:"token"`
	TokenExpiresAt *string `json:"token_expires_at"`
}

// JobRequest is POST /api/v4/jobs/request.
type JobRequest struct {
	Token      string          `json:"token"`
	SystemID   string          `json:"system_id,omitempty"`
	LastUpdate string          `json:"last_update,omitempty"`
	Info       RunnerInfo      `json:"info"`
	Session    json.RawMessage `json:"session,omitempty"`
}

// Job is the 201 body of a job request (GitLab's JobRequest::Response, the fields the runner
// reads). Arrays are always present, empty when unused.
type Job struct {
	ID            int64          `json:"id"`
	Token         string         `json:"token"`
	AllowGitFetch bool           `json:"allow_git_fetch"`
	JobInfo       JobInfo        `json:"job_info"`
	GitInfo       GitInfo        `json:"git_info"`
	RunnerInfo    JobRunnerInfo  `json:"runner_info"`
	Variables     []JobVariable  `json:"variables"`
	Steps         []Step         `json:"steps"`
	Image         Image          `json:"image"`
	Services      []Image        `json:"services"`
	Artifacts     []any          `json:"artifacts"`
	Cache         []any          `json:"cache"`
	Credentials   []any          `json:"credentials"`
	Dependencies  []any          `json:"dependencies"`
	Features      JobFeatures    `json:"features"`
	Hooks         []any          `json:"hooks"`
	Secrets       map[string]any `json:"secrets"`
}

// JobInfo describes the job for the runner's logs and directories.
type JobInfo struct {
	ID                 int64   `json:"id"`
	Name               string  `json:"name"`
	Stage              string  `json:"stage"`
	PipelineID         int64   `json:"pipeline_id"`
	ProjectID          int64   `json:"project_id"`
	ProjectName        string  `json:"project_name"`
	ProjectFullPath    string  `json:"project_full_path"`
	TimeInQueueSeconds float64 `json:"time_in_queue_seconds"`
}

// GitInfo tells the runner what to check out (nothing, with GIT_STRATEGY=none).
type GitInfo struct {
	RepoURL          string   `json:"repo_url"`
	RepoObjectFormat string   `json:"repo_object_format"`
	Ref              string   `json:"ref"`
	Sha              string   `json:"sha"`
	BeforeSha        string   `json:"before_sha"`
	RefType          string   `json:"ref_type"`
	Refspecs         []string `json:"refspecs"`
	Depth            int      `json:"depth"`
	Protected        bool     `json:"protected"`
}

// JobRunnerInfo carries the job timeout; it must be > 0 (a 0 became a 0 s deadline in
// GitLab's two-phase release).
type JobRunnerInfo struct {
	Timeout int `json:"timeout"`
}

// JobVariable is one variable of the job JSON.
type JobVariable struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Public bool   `json:"public"`
	File   bool   `json:"file"`
	Masked bool   `json:"masked"`
	Raw    bool   `json:"raw"`
}

// Step is a script or after_script step.
type Step struct {
	Name         string   `json:"name"`
	Script       []string `json:"script"`
	Timeout      int      `json:"timeout"`
	When         string   `json:"when"`
	AllowFailure bool     `json:"allow_failure"`
}

// Image is a container image reference (empty for shell executors).
type Image struct {
	Name       string   `json:"name"`
	Alias      string   `json:"alias"`
	Command    []string `json:"command"`
	Entrypoint []string `json:"entrypoint"`
	Ports      []any    `json:"ports"`
}

// JobFeatures tells the runner which failure reasons it may report.
type JobFeatures struct {
	TraceSections     bool     `json:"trace_sections"`
	TokenMaskPrefixes []string `json:"token_mask_prefixes"`
	FailureReasons    []string `json:"failure_reasons"`
}

// UpdateJobRequest is PUT /api/v4/jobs/:id.
type UpdateJobRequest struct {
	Token         string          `json:"token"`
	State         string          `json:"state"`
	FailureReason string          `json:"failure_reason,omitempty"`
	ExitCode      *int64          `json:"exit_code,omitempty"`
	Checksum      string          `json:"checksum,omitempty"`
	Output        *JobOutput      `json:"output,omitempty"`
	Info          *RunnerInfo     `json:"info,omitempty"`
	RuntimeEnvKey json.RawMessage `json:"runtime_environment_key,omitempty"`
}

// JobOutput is the trace checksum and size the runner holds.
type JobOutput struct {
	Checksum string `json:"checksum,omitempty"`
	Bytesize int64  `json:"bytesize,omitempty"`
}
