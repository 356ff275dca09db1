package builds

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Bridge jobs (.gitlab-ci.yml `trigger:`): a job that never goes to a runner.
// Once it is pending, a bridge pass (package downstream) creates its child pipeline from
// the files trigger:include names, read at the parent's commit, and moves the bridge on
// in the same transaction (Store.CreateChild): to running with strategy: depend, where it
// then follows its child (success, failed, canceled: the transaction that ends the child
// ends the bridge and advances the parent), else to success at once. A child that cannot
// be created fails the bridge with GitLab's reason. Cancelling the parent cancels its
// children; a retried bridge is a new build and creates a new child.

// Trigger is a bridge job's `trigger:` for a child pipeline.
type Trigger struct {
	// Include: the child's configuration, as `include:` entries of a file of its own
	// (GitLab builds the child's YAML as {include: <trigger:include>}).
	Include []TriggerInclude `json:"include"`
	// Strategy: "depend" (the bridge mirrors its child's end) or "" (it succeeds once the
	// child exists).
	Strategy string `json:"strategy,omitempty"`
	// Forward (trigger:forward): the bridge's own and the global YAML variables go to the
	// child (GitLab's default true), the parent's pipeline variables (default false).
	ForwardYAMLVariables     bool `json:"forward_yaml_variables"`
	ForwardPipelineVariables bool `json:"forward_pipeline_variables"`
}

// TriggerInclude is one entry of trigger:include: a file of the project's repository
// (Local), or a file inside the artifacts archive of a job of the bridge's pipeline
// (Artifact and Job: a dynamic child pipeline).
type TriggerInclude struct {
	Local    string `json:"local,omitempty"`
	Artifact string `json:"artifact,omitempty"`
	Job      string `json:"job,omitempty"`
}

// StrategyDepend is trigger:strategy: depend.
const StrategyDepend = "depend"

// SourceParentPipeline is CI_PIPELINE_SOURCE of a child pipeline.
const SourceParentPipeline = "parent_pipeline"

// MaxPipelineDepth is how deep children nest below the pipeline a push or the API
// started: GitLab allows a child of a child, two levels; a bridge in a pipeline at this
// depth fails with reached_max_descendant_pipelines_depth.
const MaxPipelineDepth = 2

// Failure reasons of bridges, GitLab's names. They are not reasons a runner reports, so
// they stay out of FailureReasons.
const (
	ReasonDownstreamCreationFailed = "downstream_pipeline_creation_failed"
	ReasonMaxDescendantsDepth      = "reached_max_descendant_pipelines_depth"
)

// Events of bridges.
const (
	EventDownstreamCreated  = "downstream_created"
	EventDownstreamFailed   = "downstream_failed"
	EventDownstreamFinished = "downstream_finished"
)

// IsBridge reports whether the definition is a bridge job.
func (j *JobDefinition) IsBridge() bool { return j.Trigger != nil }

// Depends reports whether the bridge follows its child (strategy: depend).
func (t *Trigger) Depends() bool { return t != nil && t.Strategy == StrategyDepend }

// PendingBridge is a bridge the bridge pass should create a child for: the bridge and
// what the child's compilation needs of its parent.
type PendingBridge struct {
	Build    Build
	Pipeline Pipeline // the parent, without its builds
}

// ChildPipeline is what CreateChild stores: the child's definition, or why it could not be
// made (Reason, Message) when Definition is nil.
type ChildPipeline struct {
	BridgeID   int64
	Definition *PipelineDefinition
	Reason     string
	Message    string
	Now        time.Time
}

// ChildCreated is what CreateChild did: the bridge after it, and the child (ID 0 when the
// bridge failed instead).
type ChildCreated struct {
	Bridge  Build
	ChildID int64
	Queued  bool
}

// ErrBridgeTaken: the bridge is no longer pending (another replica created its child, or
// it was canceled); nothing was written.
var ErrBridgeTaken = errors.New("bridge no longer waits for its child pipeline")

// DownstreamPipeline is a bridge's child as GitLab's bridges list shows it.
type DownstreamPipeline struct {
	ID, IID, ProjectID int64
	Ref, SHA, Status   string
	Source             string
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// BridgeView is a bridge build with its child, when it has one.
type BridgeView struct {
	Build
	Downstream *DownstreamPipeline
}

// PendingBridges lists up to limit pending bridges, oldest first.
func (s *Service) PendingBridges(ctx context.Context, limit int) ([]PendingBridge, error) {
	return s.store.PendingBridges(ctx, limit)
}

// CreateChild stores a bridge's child pipeline (or the bridge's failure) and moves the
// bridge on, in one transaction; ErrBridgeTaken when the bridge no longer waits for it.
func (s *Service) CreateChild(ctx context.Context, c ChildPipeline) (ChildCreated, error) {
	if c.Definition != nil {
		c.Definition.ParentBuildID = c.BridgeID
		if err := c.Definition.Normalize(); err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				return ChildCreated{}, err
			}
			c.Definition, c.Reason, c.Message = nil, ReasonDownstreamCreationFailed, ve.Msg
		}
	}
	if c.Now.IsZero() {
		c.Now = s.now()
	}
	res, err := s.store.CreateChild(ctx, c)
	if err != nil {
		return res, err
	}
	if res.Queued {
		s.bumpQueue(ctx)
	}
	s.notifyPipelines(ctx, res.Bridge.PipelineID)
	if res.ChildID != 0 {
		s.changed(Change{PipelineID: res.ChildID})
	}
	return res, nil
}

// cancelBridge cancels a running (depend) bridge through its child: cancelling the child
// pipeline cancels the bridge in the same transaction once the child has ended (at once
// when no runner holds any of its jobs, else when their runners stop).
func (s *Service) cancelBridge(ctx context.Context, b Build) (JobView, error) {
	list, err := s.store.Bridges(ctx, b.ProjectID, b.PipelineID)
	if err != nil {
		return JobView{}, err
	}
	for _, v := range list {
		if v.ID != b.ID || v.Downstream == nil {
			continue
		}
		if _, err := s.CancelPipeline(ctx, b.ProjectID, v.Downstream.ID); err != nil {
			return JobView{}, err
		}
		s.notifyPipelines(ctx, b.PipelineID)
		nb, err := s.store.Build(ctx, b.ID)
		if err != nil {
			return JobView{}, err
		}
		return s.view(ctx, nb), nil
	}
	return JobView{}, fmt.Errorf("cancel bridge %d: %w", b.ID, ErrConflict)
}

// Bridges lists a pipeline's bridge jobs (every attempt) with their children.
func (s *Service) Bridges(ctx context.Context, projectID, pipelineID int64) ([]BridgeView, error) {
	return s.store.Bridges(ctx, projectID, pipelineID)
}
