package builds

import (
	"regexp"
	"slices"
	"time"

	"github.com/jobapi/jobapi/gitref"
)

// Pipeline statuses.
const (
	PipelineCreated  = "created"
	PipelinePending  = "pending"
	PipelineRunning  = "running"
	PipelineSuccess  = "success"
	PipelineFailed   = "failed"
	PipelineCanceled = "canceled"
	// PipelineManual: nothing runs and a blocking manual job (allow_failure false) waits to
	// be played (GitLab shows it as "blocked"). PipelineScheduled: nothing runs and a delayed
	// job waits for its time.
	PipelineManual    = "manual"
	PipelineScheduled = "scheduled"
)

// Timeout strategies for stuck stages (SPEC §6).
const (
	TimeoutPessimistic = "pessimistic"
	TimeoutOptimistic  = "optimistic"
)

// Pipeline is an ordered list of stages and the builds in them.
type Pipeline struct {
	ID              int64
	ProjectID       int64
	IID             int64 // numbers the project's pipelines 1, 2, … (CI_PIPELINE_IID)
	Ref             string
	SHA             string
	BeforeSHA       string
	Source          string     // what started the pipeline (CI_PIPELINE_SOURCE)
	Variables       []Variable // the pipeline's own (API) variables
	Stages          []string
	TimeoutStrategy string
	Status          string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      *time.Time
	Builds          []Build
	// Parent: the bridge build that created this child pipeline and its pipeline (zero for
	// a pipeline started otherwise); Depth: how many parents it has.
	ParentBuildID    int64
	ParentPipelineID int64
	Depth            int
	// AutoCancel: workflow:auto_cancel as the pipeline was created with (defaults filled).
	AutoCancel AutoCancel
	// Runs: what views.PipelineDurations needs, filled by listings that leave Builds out
	// (nil: computed from Builds).
	Runs *PipelineRuns
	// CreatedBy: who created it (nil: not known, a pipeline older than the record).
	CreatedBy *PipelineUser
}

// PipelineDefinition is what an operator posts to create a pipeline.
type PipelineDefinition struct {
	ProjectID       int64
	Ref             string
	SHA             string
	BeforeSHA       string     // the ref's previous tip; zeros when there is none (API pipelines)
	Source          string     // a Source* value; "" means SourceAPI
	Variables       []Variable // the pipeline's own variables, above project and job ones
	Stages          []string
	TimeoutStrategy string
	Jobs            []JobDefinition
	// ParentBuildID: the bridge that creates this child pipeline (Store.CreateChild sets it).
	ParentBuildID int64
	// AutoCancel: workflow:auto_cancel (GitLab's defaults where empty).
	AutoCancel AutoCancel
	// CreatedBy is who creates it; nil: the actor of the context (CreatePipeline fills it).
	CreatedBy *PipelineUser
}

// PipelineUser is who created a pipeline, as kept with it: GitLab's `user` of a pipeline
// and of its jobs. A person is a user (UserID set); the admin token's holder and the
// machinery (a trigger, a schedule, a webhook) are named by Username.
type PipelineUser struct {
	Kind     ActorKind `json:"kind"`
	UserID   int64     `json:"user_id,omitempty"`
	Username string    `json:"username"`
	Name     string    `json:"name,omitempty"`
}

// PipelineUserOf is a as the pipeline keeps it.
func PipelineUserOf(a Actor) *PipelineUser {
	name := a.Username
	if name == "" {
		name = string(a.Kind)
	}
	return &PipelineUser{Kind: a.Kind, UserID: a.UserID, Username: name, Name: a.Name}
}

// JobDefinition uses .gitlab-ci.yml's keys where they exist.
type JobDefinition struct {
	Name           string
	Stage          string
	BeforeScript   []string
	Script         []string
	AfterScript    []string
	Tags           []string
	Variables      []Variable
	TimeoutSeconds int
	Retry          RetryRule
	AllowFailure   bool
	// AllowFailureExitCodes: `allow_failure: {exit_codes: [...]}`, the job's failure is
	// allowed only with one of these exit codes.
	AllowFailureExitCodes []int
	Image                 Image
	Services              []Image

	// When is one of the When* constants; "" means on_success. StartInSeconds is
	// `start_in` of a delayed job.
	When           string
	StartInSeconds int
	// Needs makes the job part of a DAG: it waits for these jobs only, not for earlier
	// stages. NeedsDeclared distinguishes `needs: []` (start at once) from no `needs`.
	Needs         []Need
	NeedsDeclared bool
	// Dependencies: whose artifacts the job downloads. Without DependenciesDeclared, GitLab's
	// default: the needed jobs (with artifacts: true), else every job of earlier stages.
	Dependencies         []string
	DependenciesDeclared bool
	DependsOnStages      bool // the stage default, which Normalize sets (defaultDependencies)
	Artifacts            []Artifacts
	Cache                []Cache
	// NodeIndex and NodeTotal: the job's place among `parallel:` copies (1-based), 0 when
	// the job is not parallel.
	NodeIndex, NodeTotal int
	// CoverageRegex: `coverage:` without its slashes (RE2), applied to the log at finish.
	CoverageRegex string
	// Interruptible: a newer pipeline on the same ref may cancel the job once it started
	// (Service.CancelRedundant).
	Interruptible bool
	// Environment: `environment:` with its name and url expanded; nil without one.
	Environment *Environment
	// ResourceGroup: `resource_group:` with its variables expanded ("" without one). At most
	// one job of a group holds it at a time, across the project's pipelines.
	ResourceGroup string
	// Trigger makes the job a bridge (`trigger:`): it never goes to a runner and has no
	// script; its child pipeline is created once it is pending.
	Trigger *Trigger
	// IDTokens: `id_tokens:`, each a CI/CD variable holding a JWT minted when the job is
	// handed to a runner.
	IDTokens []IDToken
}

// Limits on a definition, so that one request cannot flood the database.
const (
	MaxJobsPerPipeline = 5000
	MaxStages          = 100
	MaxNameLength      = 255
	MaxScriptLines     = 1000
	MaxScriptLine      = 64 << 10
	MaxVariables       = 200
	MaxVariableValue   = 64 << 10
	MaxTags            = 50
	MaxRetry           = 10
	MaxTimeoutSeconds  = 30 * 24 * 3600
	DefaultTimeout     = 3600
	DefaultStage       = "test"
)

var variableKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)

// Normalize fills defaults and validates the definition. It returns a *ValidationError.
func (d *PipelineDefinition) Normalize() error {
	if d.ProjectID <= 0 {
		return invalid("project_id must be a positive integer")
	}
	if d.Ref == "" {
		d.Ref = "main"
	}
	if d.SHA == "" {
		d.SHA = ZeroSHA
	}
	if err := gitref.CheckRevisions(d.Ref, d.SHA, d.BeforeSHA); err != nil {
		return &ValidationError{Msg: err.Error()}
	}
	if err := d.normalizeOrigin(); err != nil {
		return err
	}
	if err := d.AutoCancel.normalize(); err != nil {
		return err
	}
	switch d.TimeoutStrategy {
	case "":
		d.TimeoutStrategy = TimeoutPessimistic
	case TimeoutPessimistic, TimeoutOptimistic:
	default:
		return invalid("timeout_strategy must be pessimistic or optimistic, not %q", d.TimeoutStrategy)
	}
	if len(d.Stages) == 0 {
		d.Stages = []string{"build", DefaultStage, "deploy"}
	}
	if len(d.Stages) > MaxStages {
		return invalid("at most %d stages", MaxStages)
	}
	for i, s := range d.Stages {
		if err := checkName("stage", s); err != nil {
			return err
		}
		if slices.Contains(d.Stages[:i], s) {
			return invalid("stage %q is listed twice", s)
		}
	}
	if len(d.Jobs) == 0 {
		return invalid("a pipeline needs at least one job")
	}
	if len(d.Jobs) > MaxJobsPerPipeline {
		return invalid("at most %d jobs per pipeline", MaxJobsPerPipeline)
	}
	names := make(map[string]bool, len(d.Jobs))
	for i := range d.Jobs {
		if err := d.Jobs[i].normalize(d.Stages); err != nil {
			return err
		}
		if names[d.Jobs[i].Name] {
			return invalid("job name %q is used twice", d.Jobs[i].Name)
		}
		names[d.Jobs[i].Name] = true
	}
	if err := ValidateNeeds(d.Stages, d.Jobs); err != nil {
		return err
	}
	d.defaultDependencies()
	return nil
}

func checkName(what, s string) error {
	if s == "" {
		return invalid("%s name must not be empty", what)
	}
	if len(s) > MaxNameLength {
		return invalid("%s name %.40q… is longer than %d characters", what, s, MaxNameLength)
	}
	return nil
}

func (j *JobDefinition) normalize(stages []string) error {
	if err := checkName("job", j.Name); err != nil {
		return err
	}
	if j.Stage == "" {
		j.Stage = DefaultStage
	}
	if !slices.Contains(stages, j.Stage) {
		return invalid("job %q: stage %q is not in stages", j.Name, j.Stage)
	}
	if j.Trigger != nil {
		if len(j.Trigger.Include) == 0 {
			return invalid("job %q: trigger needs at least one include", j.Name)
		}
		for _, inc := range j.Trigger.Include {
			if (inc.Local == "") == (inc.Artifact == "") || (inc.Artifact != "") != (inc.Job != "") {
				return invalid("job %q: each trigger include is a local file, or an artifact with its job", j.Name)
			}
		}
		if len(j.Script) > 0 || len(j.Tags) > 0 {
			return invalid("job %q: a trigger job has no script and no tags: it never goes to a runner", j.Name)
		}
	} else if len(j.Script) == 0 {
		return invalid("job %q: script must have at least one line", j.Name)
	}
	for _, lines := range [][]string{j.Script, j.AfterScript} {
		if len(lines) > MaxScriptLines {
			return invalid("job %q: at most %d script lines", j.Name, MaxScriptLines)
		}
		for _, l := range lines {
			if len(l) > MaxScriptLine {
				return invalid("job %q: a script line is longer than %d bytes", j.Name, MaxScriptLine)
			}
		}
	}
	if len(j.Tags) > MaxTags {
		return invalid("job %q: at most %d tags", j.Name, MaxTags)
	}
	for _, t := range j.Tags {
		if t == "" || len(t) > MaxNameLength {
			return invalid("job %q: tags must be 1 to %d characters", j.Name, MaxNameLength)
		}
	}
	if len(j.Variables) > MaxVariables {
		return invalid("job %q: at most %d variables", j.Name, MaxVariables)
	}
	for _, v := range j.Variables {
		if !variableKey.MatchString(v.Key) {
			return invalid("job %q: variable name %.40q must match %s", j.Name, v.Key, variableKey)
		}
		if len(v.Value) > MaxVariableValue {
			return invalid("job %q: variable %s is longer than %d bytes", j.Name, v.Key, MaxVariableValue)
		}
	}
	switch {
	case j.TimeoutSeconds == 0:
		j.TimeoutSeconds = DefaultTimeout
	case j.TimeoutSeconds < 0 || j.TimeoutSeconds > MaxTimeoutSeconds:
		return invalid("job %q: timeout must be between 1 second and 30 days", j.Name)
	}
	if err := j.checkWhen(); err != nil {
		return err
	}
	if j.ResourceGroup != "" {
		if problem := ResourceGroupKeyProblem(j.ResourceGroup); problem != "" {
			return invalid("job %q: resource_group %.40q %s", j.Name, j.ResourceGroup, problem)
		}
	}
	if j.Retry.Max < 0 || j.Retry.Max > MaxRetry {
		return invalid("job %q: retry max must be between 0 and %d", j.Name, MaxRetry)
	}
	for _, w := range j.Retry.When {
		if w != "always" && !ValidFailureReason(w) {
			return invalid("job %q: unknown retry when %.40q", j.Name, w)
		}
	}
	return nil
}

// StageIndex returns the position of stage in the pipeline's stage list.
func (d *PipelineDefinition) StageIndex(stage string) int {
	return slices.Index(d.Stages, stage)
}
