// Package downstream creates the child pipelines of bridge jobs (.gitlab-ci.yml
// `trigger: include:`). A bridge that became pending waits in Postgres (the
// builds_bridges_idx queue) until a replica's pass, here, reads its child's configuration
// from the project's repository at the parent's commit (cisource, as include: local) or,
// for trigger:include: artifact (a dynamic child pipeline), out of the artifacts archive of
// a job of the parent pipeline (parentArtifacts), compiles it as GitLab does (the trigger's include: entries as a file of their own, source
// parent_pipeline, the forwarded variables as the child's pipeline variables) and hands
// the result to builds.Service.CreateChild, whose one transaction stores the child and
// moves the bridge on. The pass holds no lock while it reads and compiles: two replicas
// may compile the same bridge, and CreateChild's compare-and-set lets exactly one store
// a child (the other gets builds.ErrBridgeTaken). A crash before the commit leaves the
// bridge pending for the next pass; after it, nothing is left to do.
//
//	pending bridge ──pass: compile──▶ CreateChild ─┬─ child stored, bridge running (depend) or success
//	                                                ├─ configuration invalid: bridge failed
//	                                                │  (downstream_pipeline_creation_failed)
//	                                                └─ git, the object store or Postgres down:
//	                                                   left pending, next pass (a repository
//	                                                   unreachable for MaxSourceWait: failed)
package downstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/cisource"
	"github.com/jobapi/jobapi/gitref"
	"github.com/jobapi/jobapi/periodic"
)

// Bridges is the bridge pass. Safe on every replica.
type Bridges struct {
	Service   *builds.Service
	Artifacts *artifacts.Service // the parent's archives, for include: artifact
	Sources   *cisource.Source   // the project's files at the parent's commit
	ServerURL string             // CI_SERVER_URL in the child's rules
	Namespace string             // CI_PROJECT_NAMESPACE
	Interval  time.Duration
	Batch     int
	Log       *slog.Logger
	Now       func() time.Time // the clock MaxSourceWait is measured on; nil: time.Now
}

// CreateOnce creates the children of the bridges pending now and returns how many bridges
// it moved on (child created or bridge failed). A bridge whose configuration cannot be
// read now (git unreachable) stays pending and is counted in the error.
func (b *Bridges) CreateOnce(ctx context.Context) (int, error) {
	batch := b.Batch
	if batch <= 0 {
		batch = 50
	}
	pending, err := b.Service.PendingBridges(ctx, batch)
	if err != nil {
		return 0, err
	}
	moved := 0
	var errs []error
	for _, pb := range pending {
		res, err := b.create(ctx, pb)
		switch {
		case errors.Is(err, builds.ErrBridgeTaken):
			// Another replica (or a cancel) got there first.
		case err != nil:
			errs = append(errs, fmt.Errorf("bridge %d: %w", pb.Build.ID, err))
		default:
			moved++
			b.Log.InfoContext(ctx, "bridge moved on", "build_id", pb.Build.ID, "pipeline_id", pb.Build.PipelineID,
				"status", res.Bridge.Status, "child_pipeline_id", res.ChildID)
		}
	}
	return moved, errors.Join(errs...)
}

// MaxSourceWait is how long a bridge waits out a source of its child's configuration that
// cannot be read (its repository unreachable: ciconfig's Transient) before it fails with
// that message, as a wrong repo_url would otherwise leave it pending for ever.
const MaxSourceWait = time.Hour

// create compiles pb's child and stores it (or the bridge's failure).
func (b *Bridges) create(ctx context.Context, pb builds.PendingBridge) (builds.ChildCreated, error) {
	def, err := b.Definition(ctx, pb)
	c := builds.ChildPipeline{BridgeID: pb.Build.ID}
	msg, permanent := creationFailure(err)
	if !permanent && msg != "" && pb.Build.QueuedAt != nil && b.now().Sub(*pb.Build.QueuedAt) > MaxSourceWait {
		permanent = true
	}
	switch {
	case err == nil:
		c.Definition = &def
	case permanent:
		c.Reason, c.Message = builds.ReasonDownstreamCreationFailed, msg
	default:
		return builds.ChildCreated{}, err
	}
	return b.Service.CreateChild(ctx, c)
}

func (b *Bridges) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// creationFailure tells a mistake in the child's configuration, which fails the bridge
// for good, from a failure to read it now (a server's, or a source that is down: retried
// on the next pass). A transient failure the user may still have to fix (a repository that
// cannot be fetched) comes with its message and permanent false.
func creationFailure(err error) (string, bool) {
	var ce *ciconfig.Error
	var ie *ciconfig.IncludeError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &ce):
		return ce.Error(), !ce.Transient
	case errors.As(err, &ie):
		return ie.Message, !ie.Transient
	case errors.Is(err, ciconfig.ErrFilteredOut):
		return "Pipeline filtered out by workflow rules.", true
	case errors.Is(err, ciconfig.ErrNoJobs):
		return "Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline.", true
	}
	return "", false
}

// Definition compiles the child pipeline of pb: the trigger's include: entries read at the
// parent's commit, on the parent's ref, with source parent_pipeline and the variables the
// trigger forwards (the bridge's YAML variables, then the parent's pipeline variables,
// a later one of a name winning) as its pipeline variables. Its user is the parent's, as
// GitLab's child pipelines have the user of the pipeline whose bridge made them.
func (b *Bridges) Definition(ctx context.Context, pb builds.PendingBridge) (builds.PipelineDefinition, error) {
	t := pb.Build.Payload.Trigger
	if t == nil {
		return builds.PipelineDefinition{}, &ciconfig.Error{Job: pb.Build.Name, Key: "trigger", Message: "the bridge has no trigger"}
	}
	parent := pb.Pipeline
	// The parent's ref and sha were checked at its creation; one stored before that check
	// existed must not reach git either.
	if err := gitref.CheckRevisions(parent.Ref, parent.SHA, parent.BeforeSHA); err != nil {
		return builds.PipelineDefinition{}, &ciconfig.Error{Job: pb.Build.Name, Key: "trigger", Message: "the parent pipeline's " + err.Error()}
	}
	jp, err := b.Service.ProjectForPipeline(ctx, parent.ProjectID)
	if err != nil {
		return builds.PipelineDefinition{}, err
	}
	vars := forwarded(t, pb.Build.Payload.Variables, parent.Variables)
	o := ciconfig.Origin{ProjectID: parent.ProjectID, Project: jp, Ref: parent.Ref, SHA: parent.SHA,
		BeforeSHA: parent.BeforeSHA, Source: builds.SourceParentPipeline, ServerURL: b.ServerURL, Namespace: b.Namespace, Variables: vars}
	cctx := o.Context()
	repoURL := ""
	if jp.Project != nil {
		repoURL = jp.Project.RepoURL
	}
	files := b.Sources.For(ctx, repoURL, parent.SHA)
	cctx.Includes, cctx.Repository = files, files
	cctx.Artifacts = &parentArtifacts{ctx: ctx, svc: b.Service, arts: b.Artifacts, pipeline: parent}
	res, err := ciconfig.Compile(ciconfig.ChildConfig(t), cctx)
	if err != nil {
		return builds.PipelineDefinition{}, err
	}
	return builds.PipelineDefinition{ProjectID: parent.ProjectID, Ref: parent.Ref, SHA: parent.SHA,
		BeforeSHA: parent.BeforeSHA, Source: builds.SourceParentPipeline, Variables: vars,
		Stages: res.Stages, Jobs: res.Jobs, AutoCancel: res.AutoCancel, CreatedBy: parent.CreatedBy}, nil
}

// forwarded is what trigger:forward passes to the child as pipeline variables: GitLab's
// Ci::Bridge#downstream_variables, YAML variables then pipeline variables.
func forwarded(t *builds.Trigger, yamlVars, pipelineVars []builds.Variable) []builds.Variable {
	var out []builds.Variable
	at := map[string]int{}
	add := func(vs []builds.Variable) {
		for _, v := range vs {
			if i, ok := at[v.Key]; ok {
				out[i] = v
				continue
			}
			at[v.Key] = len(out)
			out = append(out, v)
		}
	}
	if t.ForwardYAMLVariables {
		add(yamlVars)
	}
	if t.ForwardPipelineVariables {
		add(pipelineVars)
	}
	return out
}

// Run creates children every Interval until ctx ends.
func (b *Bridges) Run(ctx context.Context) error {
	return periodic.Run(ctx, b.Interval, b.Log, "bridge pass", func(ctx context.Context) error {
		_, err := b.CreateOnce(ctx)
		return err
	})
}
