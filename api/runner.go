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

// Job is the 201 body of a job request: GitLab's JobRequest::Response, with the field names
// and types of gitlab-runner's JobResponse (common/network.go; spec.Job in 19.x), which
// runnerclient mirrors. Arrays are always present, empty when unused.
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
	Artifacts     []Artifact     `json:"artifacts"`
	Cache         []Cache        `json:"cache"`
	Credentials   []Credentials  `json:"credentials"`
	Dependencies  []Dependency   `json:"dependencies"`
	Features      JobFeatures    `json:"features"`
	Hooks         []Hook         `json:"hooks"`
	Secrets       map[string]any `json:"secrets"`
}

// JobInfo describes the job for the runner's logs and directories. ID is GitLab's (and
// SPEC's); the runner itself reads the top-level id.
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

// Step is a script or after_script step. GitLab's script step is before_script + script,
// when on_success; after_script is its own step, when always, allow_failure true.
type Step struct {
	Name         string   `json:"name"`
	Script       []string `json:"script"`
	Timeout      int      `json:"timeout"`
	When         string   `json:"when"`
	AllowFailure bool     `json:"allow_failure"`
}

// Image is the job's image or one of its services (empty name: none, as for shell
// executors). The runner's own omitempty fields are left out when empty.
type Image struct {
	Name       string        `json:"name"`
	Alias      string        `json:"alias,omitempty"`
	Command    []string      `json:"command,omitempty"`
	Entrypoint []string      `json:"entrypoint,omitempty"`
	Ports      []Port        `json:"ports,omitempty"`
	Variables  []JobVariable `json:"variables,omitempty"`
	PullPolicy []string      `json:"pull_policy,omitempty"`
}

// Port is a port a service exposes.
type Port struct {
	Number   int    `json:"number,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Name     string `json:"name,omitempty"`
}

// Artifact is one upload the runner makes after the job: the archive or a report.
type Artifact struct {
	Name           string   `json:"name"`
	Untracked      bool     `json:"untracked"`
	Paths          []string `json:"paths"`
	Exclude        []string `json:"exclude"`
	When           string   `json:"when"`
	ArtifactType   string   `json:"artifact_type"`
	ArtifactFormat string   `json:"artifact_format"`
	ExpireIn       string   `json:"expire_in"`
}

// Cache is one cache the runner restores before the job and saves after it.
type Cache struct {
	Key          string   `json:"key"`
	Untracked    bool     `json:"untracked"`
	Policy       string   `json:"policy"`
	Paths        []string `json:"paths"`
	When         string   `json:"when"`
	FallbackKeys []string `json:"fallback_keys"`
}

// Credentials log the runner into a registry (jobapi sends none).
type Credentials struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// Dependency is a job whose artifacts the runner downloads before the script, with Token
// (the downloading job's own, as GitLab sends it). Without ArtifactsFile the runner skips it.
type Dependency struct {
	ID            int64                    `json:"id"`
	Name          string                   `json:"name"`
	Token         string                   `json:"token"`
	ArtifactsFile *DependencyArtifactsFile `json:"artifacts_file,omitempty"`
}

// DependencyArtifactsFile is a dependency's stored archive.
type DependencyArtifactsFile struct {
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
}

// Hook is a script the runner runs around get_sources (jobapi sends none).
type Hook struct {
	Name   string   `json:"name"`
	Script []string `json:"script"`
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
