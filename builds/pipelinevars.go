package builds

import (
	"slices"
	"time"

	"github.com/jobapi/jobapi/gitref"
)

// Pipeline sources jobapi accepts (CI_PIPELINE_SOURCE, GitLab's names). A pipeline posted
// to the API is SourceAPI unless the caller says otherwise, for instance a webhook bridge
// that creates pipelines on pushes (SourcePush, with BeforeSHA).
const (
	SourceAPI      = "api"
	SourcePush     = "push"
	SourceWeb      = "web"
	SourceTrigger  = "trigger"
	SourceSchedule = "schedule"
	// SourceMergeRequestEvent: a merge (pull) request's webhook (builds/pushes). Not among
	// Sources: such a pipeline carries its merge request (CI_MERGE_REQUEST_IID among its
	// variables), which a bare source cannot claim.
	SourceMergeRequestEvent = "merge_request_event"
	// SourcePipeline: started by a job with its CI_JOB_TOKEN (GitLab's multi-project
	// pipelines; jobapi's triggers take a job's token for its own project).
	SourcePipeline = "pipeline"
)

// Sources lists the accepted pipeline sources.
var Sources = []string{SourceAPI, SourcePush, SourceWeb, SourceTrigger, SourceSchedule, SourcePipeline}

// ZeroSHA is before_sha when there is no previous commit (a new ref, or an API pipeline).
const ZeroSHA = "0000000000000000000000000000000000000000"

// JobPipeline is what a claimed build's payload needs of its pipeline beyond Build.Ref and
// Build.SHA. The claim reads it with the build, in the same statement.
type JobPipeline struct {
	IID       int64
	Source    string
	BeforeSHA string
	CreatedAt time.Time
	Variables []Variable
}

// normalizeOrigin checks what started the pipeline: its source, the previous commit and
// the pipeline's own variables. GitLab's pipeline variables are neither masked nor public
// (the API takes key, value and variable_type), so Masked is refused here.
func (d *PipelineDefinition) normalizeOrigin() error {
	switch {
	case d.Source == "":
		d.Source = SourceAPI
	case d.Source == SourceParentPipeline && d.ParentBuildID != 0:
		// a child pipeline, which only a bridge job creates (Service.CreateChild)
	case d.Source == SourceMergeRequestEvent && slices.ContainsFunc(d.Variables, func(v Variable) bool { return v.Key == "CI_MERGE_REQUEST_IID" }):
		// a merge request's pipeline, with its merge request's variables
	case !slices.Contains(Sources, d.Source):
		return invalid("source %.40q must be one of %v", d.Source, Sources)
	}
	if d.BeforeSHA == "" {
		d.BeforeSHA = ZeroSHA
	}
	if err := gitref.CheckSHA("before_sha", d.BeforeSHA); err != nil {
		return &ValidationError{Msg: err.Error()}
	}
	if len(d.Variables) > MaxVariables {
		return invalid("at most %d pipeline variables", MaxVariables)
	}
	seen := make(map[string]bool, len(d.Variables))
	for _, v := range d.Variables {
		if !variableKey.MatchString(v.Key) {
			return invalid("pipeline variable name %.40q must match %s", v.Key, variableKey)
		}
		if seen[v.Key] {
			return invalid("pipeline variable %s is given twice", v.Key)
		}
		seen[v.Key] = true
		if len(v.Value) > MaxVariableValue {
			return invalid("pipeline variable %s is longer than %d bytes", v.Key, MaxVariableValue)
		}
		if v.Masked {
			return invalid("pipeline variable %s: pipeline variables cannot be masked; use a masked project variable", v.Key)
		}
	}
	return nil
}
