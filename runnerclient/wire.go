package runnerclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"time"
)

// The runner this client claims to be (User-Agent and info).
const (
	RunnerName     = "gitlab-runner"
	RunnerVersion  = "19.4.0"
	RunnerRevision = "fc1f1862"
	runnerBranch   = "19-4-stable"
	runnerGo       = "go1.24.6"
)

// Info mirrors common.Info: what the runner says about itself in verify,
// jobs/request and every job update.
type Info struct {
	Name         string            `json:"name,omitempty"`
	Version      string            `json:"version,omitempty"`
	Revision     string            `json:"revision,omitempty"`
	Platform     string            `json:"platform,omitempty"`
	Architecture string            `json:"architecture,omitempty"`
	Executor     string            `json:"executor,omitempty"`
	Shell        string            `json:"shell,omitempty"`
	Features     FeaturesInfo      `json:"features"`
	Config       ConfigInfo        `json:"config,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// FeaturesInfo mirrors common.FeaturesInfo. No omitempty: the runner always
// sends every key as a boolean, so the server must cope with false values.
type FeaturesInfo struct {
	Variables               bool `json:"variables"`
	Image                   bool `json:"image"`
	Services                bool `json:"services"`
	Artifacts               bool `json:"artifacts"`
	Cache                   bool `json:"cache"`
	FallbackCacheKeys       bool `json:"fallback_cache_keys"`
	Shared                  bool `json:"shared"`
	UploadMultipleArtifacts bool `json:"upload_multiple_artifacts"`
	UploadRawArtifacts      bool `json:"upload_raw_artifacts"`
	Session                 bool `json:"session"`
	Terminal                bool `json:"terminal"`
	Refspecs                bool `json:"refspecs"`
	Masking                 bool `json:"masking"`
	Proxy                   bool `json:"proxy"`
	RawVariables            bool `json:"raw_variables"`
	ArtifactsExclude        bool `json:"artifacts_exclude"`
	MultiBuildSteps         bool `json:"multi_build_steps"`
	TraceReset              bool `json:"trace_reset"`
	TraceChecksum           bool `json:"trace_checksum"`
	TraceSize               bool `json:"trace_size"`
	VaultSecrets            bool `json:"vault_secrets"`
	Cancelable              bool `json:"cancelable"`
	ReturnExitCode          bool `json:"return_exit_code"`
	ServiceVariables        bool `json:"service_variables"`
	ServiceMultipleAliases  bool `json:"service_multiple_aliases"`
	ImageExecutorOpts       bool `json:"image_executor_opts"`
	ServiceExecutorOpts     bool `json:"service_executor_opts"`
	CancelGracefully        bool `json:"cancel_gracefully"`
	NativeStepsIntegration  bool `json:"native_steps_integration"`
	TwoPhaseJobCommit       bool `json:"two_phase_job_commit"`
	JobInputs               bool `json:"job_inputs"`
}

// ConfigInfo mirrors common.ConfigInfo.
type ConfigInfo struct {
	Gpus string `json:"gpus"`
}

// DefaultInfo is what gitlab-runner 19.4 with the shell executor and bash
// reports: the network client's features (trace_*, cancelable,
// cancel_gracefully, two_phase_job_commit, job_inputs; network/gitlab.go
// getFeatures) plus the shell executor's and the shell's.
// Set Features.TwoPhaseJobCommit to false to play a runner without two-phase.
func DefaultInfo() Info {
	return Info{
		Name:         RunnerName,
		Version:      RunnerVersion,
		Revision:     RunnerRevision,
		Platform:     runtime.GOOS,
		Architecture: runtime.GOARCH,
		Executor:     "shell",
		Shell:        "bash",
		Features: FeaturesInfo{
			Variables:               true,
			Artifacts:               true,
			Cache:                   true,
			FallbackCacheKeys:       true,
			Shared:                  true,
			UploadMultipleArtifacts: true,
			UploadRawArtifacts:      true,
			Refspecs:                true,
			Masking:                 true,
			RawVariables:            true,
			ArtifactsExclude:        true,
			MultiBuildSteps:         true,
			TraceReset:              true,
			TraceChecksum:           true,
			TraceSize:               true,
			VaultSecrets:            true,
			Cancelable:              true,
			ReturnExitCode:          true,
			CancelGracefully:        true,
			TwoPhaseJobCommit:       true,
			JobInputs:               true,
		},
	}
}

// verifyRunnerRequest mirrors common.VerifyRunnerRequest; the runner adds
// info so Rails records the manager's features (see runner-wire-format §3.1).
type verifyRunnerRequest struct {
	Token    string `json:"token,omitempty"`
	SystemID string `json:"system_id,omitempty"`
	Info     Info   `json:"info"`
}

// jobRequest mirrors common.JobRequest.
type jobRequest struct {
	Info       Info   `json:"info,omitempty"`
	Token      string `json:"token,omitempty"`
	SystemID   string `json:"system_id,omitempty"`
	LastUpdate string `json:"last_update,omitempty"`
}

// updateJobRequest mirrors common.UpdateJobRequest. Output is a struct, so
// omitempty never drops it: "output":{} is always present. exit_code 0 is
// dropped, so the server must read a missing exit_code as 0.
type updateJobRequest struct {
	Info          Info           `json:"info,omitempty"`
	Token         string         `json:"token,omitempty"`
	State         string         `json:"state,omitempty"`
	FailureReason string         `json:"failure_reason,omitempty"`
	Checksum      string         `json:"checksum,omitempty"` // deprecated duplicate of output.checksum
	Output        jobTraceOutput `json:"output,omitempty"`
	ExitCode      int            `json:"exit_code,omitempty"`
}

type jobTraceOutput struct {
	Checksum string `json:"checksum,omitempty"`
	Bytesize int    `json:"bytesize,omitempty"`
}

// VerifyResult mirrors common.VerifyRunnerResponse.
type VerifyResult struct {
	ID    int64  `json:"id"`
	Token string `json:"token"`
	// TokenExpiresAt is zero for null; a non-zero value makes the runner
	// schedule a token reset at 75 % of the lifetime.
	TokenExpiresAt time.Time   `json:"token_expires_at"`
	Header         http.Header `json:"-"`
}

// Job mirrors spec.Job (common/network.go JobResponse in 17.x) for every field
// GitLab's JobRequest::Response sends. Field types are the runner's: a server
// sending, say, a number where the runner expects a string fails to decode
// here as it would in gitlab-runner. Unknown fields are ignored and missing
// ones stay zero, as in the runner; DecodeJobStrict also refuses unknown ones.
type Job struct {
	ID            int64          `json:"id"`
	Token         string         `json:"token"`
	AllowGitFetch bool           `json:"allow_git_fetch"`
	JobInfo       JobInfo        `json:"job_info"`
	GitInfo       GitInfo        `json:"git_info"`
	RunnerInfo    RunnerInfo     `json:"runner_info"`
	Variables     []Variable     `json:"variables"`
	Steps         []Step         `json:"steps"`
	Image         Image          `json:"image"`
	Services      []Image        `json:"services"`
	Artifacts     []Artifact     `json:"artifacts"`
	Cache         []Cache        `json:"cache"`
	Credentials   []Credentials  `json:"credentials"`
	Dependencies  []Dependency   `json:"dependencies"`
	Features      GitlabFeatures `json:"features"`
	Hooks         []Hook         `json:"hooks,omitempty"`
	// Secrets maps a name to the runner's Secret (vault, gcp, azure…); kept raw.
	Secrets map[string]json.RawMessage `json:"secrets,omitempty"`

	// Raw is the 201 body as received, for assertions on fields this
	// struct does not mirror.
	Raw json.RawMessage `json:"-"`
}

// Timeout is the job's deadline as the runner computes it
// (Build.GetBuildTimeout): runner_info.timeout seconds, 7200 s when <= 0.
func (j *Job) Timeout() time.Duration {
	if j.RunnerInfo.Timeout <= 0 {
		return 7200 * time.Second
	}
	return time.Duration(j.RunnerInfo.Timeout) * time.Second
}

// Variable returns the value of the job variable key and whether it is set.
func (j *Job) Variable(key string) (string, bool) {
	for _, v := range j.Variables {
		if v.Key == key {
			return v.Value, true
		}
	}
	return "", false
}

// JobInfo mirrors spec.JobInfo.
type JobInfo struct {
	Name            string `json:"name"`
	Stage           string `json:"stage"`
	PipelineID      int64  `json:"pipeline_id"`
	ProjectID       int64  `json:"project_id"`
	ProjectName     string `json:"project_name"`
	ProjectFullPath string `json:"project_full_path"`
	NamespaceID     int64  `json:"namespace_id"`
	RootNamespaceID int64  `json:"root_namespace_id"`
	OrganizationID  int64  `json:"organization_id"`
	InstanceID      string `json:"instance_id"`
	InstanceUUID    string `json:"instance_uuid"`
	UserID          int64  `json:"user_id"`
	ScopedUserID    *int64 `json:"scoped_user_id,omitempty"`

	TimeInQueueSeconds float64 `json:"time_in_queue_seconds"`
	// A string in the runner ("+Inf" is a valid value), not a number.
	ProjectJobsRunningOnInstanceRunnersCount string `json:"project_jobs_running_on_instance_runners_count"`
	QueueSize                                int64  `json:"queue_size"`
	QueueDepth                               int64  `json:"queue_depth"`
}

// GitInfo mirrors spec.GitInfo.
type GitInfo struct {
	RepoURL          string   `json:"repo_url"`
	RepoObjectFormat string   `json:"repo_object_format"`
	Ref              string   `json:"ref"`
	Sha              string   `json:"sha"`
	BeforeSha        string   `json:"before_sha"`
	RefType          string   `json:"ref_type"`
	Refspecs         []string `json:"refspecs"`
	Depth            int      `json:"depth"`
	Protected        *bool    `json:"protected"`
}

// RunnerInfo mirrors spec.RunnerInfo.
type RunnerInfo struct {
	UUID    string `json:"uuid"`
	Timeout int    `json:"timeout"`
}

// Variable mirrors spec.Variable.
type Variable struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Public bool   `json:"public"`
	File   bool   `json:"file"`
	Masked bool   `json:"masked"`
	Raw    bool   `json:"raw"`
}

// Step mirrors spec.Step.
type Step struct {
	Name         string   `json:"name"` // script, after_script, run
	Script       []string `json:"script"`
	Timeout      int      `json:"timeout"`
	When         string   `json:"when"` // on_success (or empty), on_failure, always
	AllowFailure bool     `json:"allow_failure"`
}

// Image mirrors spec.Image (also used for services).
type Image struct {
	Name       string     `json:"name"`
	Alias      string     `json:"alias,omitempty"`
	Command    []string   `json:"command,omitempty"`
	Entrypoint []string   `json:"entrypoint,omitempty"`
	Ports      []Port     `json:"ports,omitempty"`
	Variables  []Variable `json:"variables,omitempty"`
	PullPolicy []string   `json:"pull_policy,omitempty"`
	// An object in the runner (ImageExecutorOptions); kept raw per key.
	ExecutorOpts map[string]json.RawMessage `json:"executor_opts,omitempty"`
}

// Port mirrors spec.Port.
type Port struct {
	Number   int    `json:"number,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Name     string `json:"name,omitempty"`
}

// Artifact mirrors spec.Artifact: an upload after the job.
type Artifact struct {
	Name      string   `json:"name"`
	Untracked bool     `json:"untracked"`
	Paths     []string `json:"paths"`
	Exclude   []string `json:"exclude"`
	When      string   `json:"when"` // on_success (or empty), on_failure, always
	Type      string   `json:"artifact_type"`
	Format    string   `json:"artifact_format"`
	ExpireIn  string   `json:"expire_in"`
}

// Cache mirrors spec.Cache.
type Cache struct {
	Key          string   `json:"key"`
	Untracked    bool     `json:"untracked"`
	Policy       string   `json:"policy"` // pull-push (or empty), pull, push
	Paths        []string `json:"paths"`
	When         string   `json:"when"`
	FallbackKeys []string `json:"fallback_keys"`
}

// Credentials mirrors spec.Credentials (a registry login).
type Credentials struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// Dependency mirrors spec.Dependency. The runner downloads the artifacts of
// each entry whose artifacts_file has a filename, with Token, and skips the
// others (shells/abstract.go jobArtifacts).
type Dependency struct {
	ID            int64                   `json:"id"`
	Token         string                  `json:"token"`
	Name          string                  `json:"name"`
	ArtifactsFile DependencyArtifactsFile `json:"artifacts_file"`
}

// DependencyArtifactsFile mirrors spec.DependencyArtifactsFile.
type DependencyArtifactsFile struct {
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
}

// Hook mirrors spec.Hook (pre_get_sources_script, post_get_sources_script).
type Hook struct {
	Name   string   `json:"name"`
	Script []string `json:"script"`
}

// GitlabFeatures mirrors spec.GitlabFeatures.
type GitlabFeatures struct {
	TraceSections     bool     `json:"trace_sections"`
	TokenMaskPrefixes []string `json:"token_mask_prefixes"`
	FailureReasons    []string `json:"failure_reasons"`
	// An object in the runner (spec.Tracing); kept raw.
	Tracing json.RawMessage `json:"tracing,omitempty"`
}

// DecodeJobStrict decodes a job JSON as gitlab-runner does, and also fails on
// a field the runner does not know, apart from job_info.id, which GitLab sends
// and the runner ignores: a check that the server sends nothing the runner
// would silently drop.
func DecodeJobStrict(body []byte) (*Job, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	if info, ok := doc["job_info"]; ok {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(info, &fields); err != nil {
			return nil, fmt.Errorf("job_info: %w", err)
		}
		delete(fields, "id")
		doc["job_info"], _ = json.Marshal(fields)
	}
	stripped, _ := json.Marshal(doc)
	dec := json.NewDecoder(bytes.NewReader(stripped))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return nil, err
	}
	j.Raw = append(json.RawMessage(nil), body...)
	return &j, nil
}
