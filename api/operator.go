package api

import "time"

// TokenReset answers POST /api/v4/runners/reset_authentication_token and its operator twin
// /runners/:id/reset_authentication_token; the new token is shown only here.
type TokenReset struct {
	Token          string  `json:"token"`
	TokenExpiresAt *string `json:"token_expires_at"`
}

// RunnerCreated answers POST /api/v4/user/runners; the token is shown only here.
type RunnerCreated struct {
	ID             int64   `json:"id"`
	Token          string  `json:"token"`
	TokenExpiresAt *string `json:"token_expires_at"`
}

// Runner is a runner as operators see it.
type Runner struct {
	ID          int64    `json:"id"`
	Description string   `json:"description"`
	TagList     []string `json:"tag_list"`
	RunUntagged bool     `json:"run_untagged"`
	Paused      bool     `json:"paused"`
	Active      bool     `json:"active"`
	// AccessLevel is GitLab's: not_protected, or ref_protected (jobs of protected refs only).
	AccessLevel string     `json:"access_level"`
	CreatedAt   time.Time  `json:"created_at"`
	ContactedAt *time.Time `json:"contacted_at"`
	Managers    []Manager  `json:"managers"`
}

// Manager is one machine using a runner token.
type Manager struct {
	SystemID     string          `json:"system_id"`
	Version      string          `json:"version"`
	Revision     string          `json:"revision"`
	Platform     string          `json:"platform"`
	Architecture string          `json:"architecture"`
	Executor     string          `json:"executor"`
	Features     map[string]bool `json:"features"`
	ContactedAt  time.Time       `json:"contacted_at"`
	// IPAddress is where the machine last contacted jobapi from (GitLab's ip_address).
	IPAddress string `json:"ip_address"`
}

// PipelineJob is a job inside a pipeline listing.
type PipelineJob struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Stage     string `json:"stage"`
	Status    string `json:"status"`
	Attempt   int    `json:"attempt"`
	RetryOf   *int64 `json:"retry_of"`
	RetriedBy *int64 `json:"retried_by"`
	// Bridge: a trigger job (its child: GET …/pipelines/:id/bridges).
	Bridge bool `json:"bridge,omitempty"`
}

// Pipeline is a pipeline with its jobs (every attempt).
type Pipeline struct {
	ID              int64         `json:"id"`
	IID             int64         `json:"iid"`
	ProjectID       int64         `json:"project_id"`
	Ref             string        `json:"ref"`
	Sha             string        `json:"sha"`
	BeforeSha       string        `json:"before_sha"`
	Source          string        `json:"source"`
	Status          string        `json:"status"`
	Stages          []string      `json:"stages"`
	TimeoutStrategy string        `json:"timeout_strategy"`
	CreatedAt       time.Time     `json:"created_at"`
	UpdatedAt       time.Time     `json:"updated_at"`
	FinishedAt      *time.Time    `json:"finished_at"`
	Jobs            []PipelineJob `json:"jobs"`
	// Coverage: the average of its latest jobs' coverage, two decimals in a string as
	// GitLab shows it ("87.50"); null when no job has one.
	Coverage *string `json:"coverage"`
	// Variables are the pipeline's own, by key and type: their values are not shown, as a
	// pipeline variable cannot be masked and often carries a secret given at trigger time.
	Variables []PipelineVariable `json:"variables"`
	// GitStrategy is "none" when the project has no repository (its jobs get
	// GIT_STRATEGY=none), "fetch" when it has one; absent where not looked up.
	GitStrategy string `json:"git_strategy,omitempty"`
	// ParentPipelineID and ParentJobID: the pipeline and the bridge job that created this
	// child pipeline (source parent_pipeline); null for a pipeline started otherwise.
	ParentPipelineID *int64 `json:"parent_pipeline_id"`
	ParentJobID      *int64 `json:"parent_job_id"`
	// GitLab's fields: Tag for a tag pipeline (ref refs/tags/…); StartedAt, when its first
	// job started; QueuedDuration, seconds from its creation to then (to now before);
	// Duration, the seconds during which one of its latest jobs ran (to now while one runs);
	// WebURL, its page in the web UI.
	Tag            bool       `json:"tag"`
	StartedAt      *time.Time `json:"started_at"`
	QueuedDuration *float64   `json:"queued_duration"`
	Duration       *int64     `json:"duration"`
	WebURL         string     `json:"web_url"`
	// User: who created the pipeline (GitLab's user); null where not known.
	User *User `json:"user"`
}

// PipelineBasic is a pipeline as GitLab's list (GET /projects/:id/pipelines) shows it: Ref
// is the branch or tag name, as GitLab's.
type PipelineBasic struct {
	ID        int64     `json:"id"`
	IID       int64     `json:"iid"`
	ProjectID int64     `json:"project_id"`
	Sha       string    `json:"sha"`
	Ref       string    `json:"ref"`
	Status    string    `json:"status"`
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	WebURL    string    `json:"web_url"`
}

// PipelineVariableValue is one of GitLab's GET …/pipelines/:id/variables.
type PipelineVariableValue struct {
	Key          string `json:"key"`
	Value        string `json:"value"`
	VariableType string `json:"variable_type"`
}

// Bridge is a trigger job in GitLab's GET /projects/:id/pipelines/:pipeline_id/bridges.
type Bridge struct {
	ID                 int64                 `json:"id"`
	Name               string                `json:"name"`
	Stage              string                `json:"stage"`
	Status             string                `json:"status"`
	Ref                string                `json:"ref"`
	Tag                bool                  `json:"tag"`
	AllowFailure       bool                  `json:"allow_failure"`
	CreatedAt          time.Time             `json:"created_at"`
	StartedAt          *time.Time            `json:"started_at"`
	FinishedAt         *time.Time            `json:"finished_at"`
	Duration           *float64              `json:"duration"`
	QueuedDuration     *float64              `json:"queued_duration"`
	FailureReason      *string               `json:"failure_reason,omitempty"`
	Attempt            int                   `json:"attempt"`
	RetryOf            *int64                `json:"retry_of"`
	RetriedBy          *int64                `json:"retried_by"`
	Pipeline           BridgePipeline        `json:"pipeline"`
	DownstreamPipeline *BridgePipeline       `json:"downstream_pipeline"`
	Trigger            BridgeTriggerStrategy `json:"trigger"`
}

// BridgePipeline is the upstream or downstream pipeline of a bridge, GitLab's short form.
type BridgePipeline struct {
	ID        int64     `json:"id"`
	IID       int64     `json:"iid"`
	ProjectID int64     `json:"project_id"`
	Sha       string    `json:"sha"`
	Ref       string    `json:"ref"`
	Status    string    `json:"status"`
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// BridgeTriggerStrategy is jobapi's addition: what the bridge's trigger: says.
type BridgeTriggerStrategy struct {
	Include  []string `json:"include"`
	Strategy *string  `json:"strategy"`
}

// PipelineVariable names a pipeline variable (GitLab's variable_type: env_var or file).
type PipelineVariable struct {
	Key          string `json:"key"`
	VariableType string `json:"variable_type"`
}

// JobRunner is the runner that holds or held a job: GitLab's short runner form.
type JobRunner = ListedRunner

// JobRunnerManager identifies the machine that holds a job.
type JobRunnerManager struct {
	SystemID string `json:"system_id"`
}

// JobAck is the two-phase acknowledgement deadline of a waiting job.
type JobAck struct {
	Deadline   *time.Time `json:"deadline"`
	TTLSeconds *float64   `json:"ttl_seconds"`
}

// JobDetail is GET /api/v4/projects/:project_id/jobs/:job_id.
type JobDetail struct {
	ID            int64   `json:"id"`
	ProjectID     int64   `json:"project_id"`
	PipelineID    int64   `json:"pipeline_id"`
	Name          string  `json:"name"`
	Stage         string  `json:"stage"`
	Status        string  `json:"status"`
	FailureReason *string `json:"failure_reason"`
	// Ref is the branch or tag name; Tag says which.
	Ref string `json:"ref"`
	Tag bool   `json:"tag"`
	// Duration: seconds from started_at to finished_at (or now, while it runs);
	// QueuedDuration: from queued_at to started_at (or now, while it waits).
	Duration       *float64     `json:"duration"`
	QueuedDuration *float64     `json:"queued_duration"`
	WebURL         string       `json:"web_url"`
	Pipeline       *JobPipeline `json:"pipeline"`
	// Commit is the pipeline's commit as GitLab shows it; id and short_id only when the
	// project's repository could not tell the rest.
	Commit *JobCommit `json:"commit"`
	// User: who created the job's pipeline; null where not known.
	User          *User             `json:"user"`
	Attempt       int               `json:"attempt"`
	RetryOf       *int64            `json:"retry_of"`
	RetriedBy     *int64            `json:"retried_by"`
	TwoPhase      bool              `json:"two_phase"`
	Runner        *JobRunner        `json:"runner"`
	RunnerManager *JobRunnerManager `json:"runner_manager"`
	Ack           *JobAck           `json:"ack"`
	Tags          []string          `json:"tag_list"`
	Timeout       int               `json:"timeout"`
	AllowFailure  bool              `json:"allow_failure"`
	// When is .gitlab-ci.yml's when (on_success, on_failure, always, manual, delayed).
	When string `json:"when"`
	// ScheduledAt: when a delayed job becomes pending, once it is scheduled.
	ScheduledAt *time.Time `json:"scheduled_at"`
	CreatedAt   time.Time  `json:"created_at"`
	QueuedAt    *time.Time `json:"queued_at"`
	AssignedAt  *time.Time `json:"assigned_at"`
	StartedAt   *time.Time `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	ExitCode    *int64     `json:"exit_code"`
	TraceSize   int64      `json:"trace_size"`
	// Coverage: what the job's coverage regex found in its log; null without one.
	Coverage *float64 `json:"coverage"`
	// The job's stored artifacts, archive first, as GitLab's job API lists them (absent only
	// where a view has not read them).
	Artifacts []JobArtifact `json:"artifacts,omitzero"`
	// ArtifactsFile is the archive ({filename, size}); null when the job has none.
	ArtifactsFile     *ArtifactsFile `json:"artifacts_file,omitempty"`
	ArtifactsExpireAt *time.Time     `json:"artifacts_expire_at,omitempty"`
}

// JobCommit is GitLab's commit of a job. The fields after short_id are null when the
// project's repository does not have the commit (a pipeline posted with its own sha).
type JobCommit struct {
	ID             string     `json:"id"`
	ShortID        string     `json:"short_id"`
	Title          *string    `json:"title"`
	Message        *string    `json:"message"`
	ParentIDs      []string   `json:"parent_ids"`
	CreatedAt      *time.Time `json:"created_at"`
	AuthorName     *string    `json:"author_name"`
	AuthorEmail    *string    `json:"author_email"`
	AuthoredDate   *time.Time `json:"authored_date"`
	CommitterName  *string    `json:"committer_name"`
	CommitterEmail *string    `json:"committer_email"`
	CommittedDate  *time.Time `json:"committed_date"`
	WebURL         string     `json:"web_url"`
}

// JobArtifact is one stored artifact of a job.
type JobArtifact struct {
	FileType   string     `json:"file_type"`
	FileFormat string     `json:"file_format"`
	Filename   string     `json:"filename"`
	Size       int64      `json:"size"`
	SHA256     string     `json:"sha256"`
	ExpireAt   *time.Time `json:"expire_at"`
	// Access: the job's artifacts:access when it was uploaded (all, developer, none);
	// none refuses the operator's downloads.
	Access string `json:"access"`
	// ExposeAs: the archive's artifacts:expose_as label, when it has one.
	ExposeAs string `json:"expose_as,omitempty"`
}

// ArtifactsFile names a job's archive.
type ArtifactsFile struct {
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
}

// Event is one entry of a job's history.
type Event struct {
	ID            int64          `json:"id"`
	Type          string         `json:"type"`
	At            time.Time      `json:"at"`
	RunnerManager string         `json:"runner_manager"`
	Detail        map[string]any `json:"detail"`
}

// PipelineWait answers GET .../pipelines/:pipeline_id/wait.
type PipelineWait struct {
	Status        string  `json:"status"`
	JobsRemaining int     `json:"jobs_remaining"`
	Finished      []int64 `json:"finished"`
}

// AuditEvent is one operator action (GET /api/v4/admin/events), newest first.
type AuditEvent struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Target string         `json:"target"`
	Detail map[string]any `json:"detail"`
}

// Project is a project as operators see it; repo_url never shows credentials.
type Project struct {
	ID                int64  `json:"id"`
	Name              string `json:"name"`
	Path              string `json:"path"`
	PathWithNamespace string `json:"path_with_namespace"`
	RepoURL           string `json:"repo_url"`
	DefaultBranch     string `json:"default_branch"`
	// CIConfigPath is the file a pipeline from the repository reads ("": .gitlab-ci.yml).
	CIConfigPath string    `json:"ci_config_path"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// ProjectVariable is a project CI/CD variable (GitLab's shape).
type ProjectVariable struct {
	Key              string `json:"key"`
	Value            string `json:"value"`
	Masked           bool   `json:"masked"`
	Protected        bool   `json:"protected"`
	VariableType     string `json:"variable_type"`
	EnvironmentScope string `json:"environment_scope"`
}

// Environment is GitLab's environment (GET /projects/:id/environments[/:environment_id]).
type Environment struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Slug        string    `json:"slug"`
	ExternalURL *string   `json:"external_url"`
	State       string    `json:"state"` // available or stopped
	Tier        string    `json:"tier"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// LastDeployment: the latest successful deployment, in GET of one environment only (as
	// GitLab); null when none succeeded.
	LastDeployment *Deployment `json:"last_deployment,omitempty"`
}

// Deployment is GitLab's deployment (GET /projects/:id/deployments, last_deployment).
// Status and finished_at follow its job's.
type Deployment struct {
	ID          int64                 `json:"id"`
	Ref         string                `json:"ref"`
	Sha         string                `json:"sha"`
	Status      string                `json:"status"`
	CreatedAt   time.Time             `json:"created_at"`
	UpdatedAt   time.Time             `json:"updated_at"`
	FinishedAt  *time.Time            `json:"finished_at"`
	Environment DeploymentEnvironment `json:"environment"`
	Deployable  Deployable            `json:"deployable"`
}

// DeploymentEnvironment is the environment a deployment names.
type DeploymentEnvironment struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Deployable is the job that deploys, with its pipeline.
type Deployable struct {
	ID         int64              `json:"id"`
	Name       string             `json:"name"`
	Stage      string             `json:"stage"`
	Status     string             `json:"status"`
	Ref        string             `json:"ref"`
	CreatedAt  time.Time          `json:"created_at"`
	StartedAt  *time.Time         `json:"started_at"`
	FinishedAt *time.Time         `json:"finished_at"`
	Pipeline   DeployablePipeline `json:"pipeline"`
}

// DeployablePipeline is the pipeline of a deployable.
type DeployablePipeline struct {
	ID  int64  `json:"id"`
	Ref string `json:"ref"`
	Sha string `json:"sha"`
}

// ResourceGroup is GitLab's resource group (GET /projects/:id/resource_groups[/:key],
// PUT …/:key).
type ResourceGroup struct {
	ID          int64     `json:"id"`
	Key         string    `json:"key"`
	ProcessMode string    `json:"process_mode"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// ProtectedBranch is GitLab's protected branch: a name or a wildcard pattern (release/*).
type ProtectedBranch struct {
	ID                        int64            `json:"id"`
	Name                      string           `json:"name"`
	PushAccessLevels          []RefAccessLevel `json:"push_access_levels"`
	MergeAccessLevels         []RefAccessLevel `json:"merge_access_levels"`
	AllowForcePush            bool             `json:"allow_force_push"`
	CodeOwnerApprovalRequired bool             `json:"code_owner_approval_required"`
}

// ProtectedTag is GitLab's protected tag: a name or a wildcard pattern (v*).
type ProtectedTag struct {
	Name               string           `json:"name"`
	CreateAccessLevels []RefAccessLevel `json:"create_access_levels"`
}

// RefAccessLevel is one role's access to a protected ref, as GitLab shows it (jobapi has
// roles only: user_id and group_id are null).
type RefAccessLevel struct {
	ID                     int64  `json:"id"`
	AccessLevel            int    `json:"access_level"`
	AccessLevelDescription string `json:"access_level_description"`
	UserID                 *int64 `json:"user_id"`
	GroupID                *int64 `json:"group_id"`
}
