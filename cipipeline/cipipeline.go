// Package cipipeline creates pipelines from the project's repository, as GitLab does for
// every pipeline that names only a ref: the ref is resolved to its head commit on the
// project's remote (repo_url), .gitlab-ci.yml (or the project's ci_config_path) is read at
// that commit and compiled for the pipeline's source, with include: local and
// rules:exists/changes reading the same commit. The API's POST …/pipeline with a ref,
// trigger tokens, schedules and pushes all come through Creator.FromRef, each with its own
// CI_PIPELINE_SOURCE.
//
//	ref ──git ls-remote──▶ refs/heads/… or refs/tags/… ──fetch──▶ commit
//	    ──read ci_config_path at commit──▶ compile (rules see source, ref, variables)
//	    ──builds.Service.CreatePipeline──▶ pipeline ──▶ auto-cancel of redundant ones
//
// Nothing is written before the pipeline itself: an unknown ref, an unreachable remote, a
// missing or invalid file is an error (*ciconfig.Error, a 400 for the API; Transient when
// the remote could not be read) and no row.
package cipipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/cisource"
	"github.com/jobapi/jobapi/gitref"
)

// DefaultConfigPath is the file read when the project names none (GitLab's default).
const DefaultConfigPath = ".gitlab-ci.yml"

// Creator creates pipelines from the project's repository. Safe for concurrent use.
type Creator struct {
	Service *builds.Service
	// Sources reads the repository (its Git) and the configuration's includes.
	Sources *cisource.Source
	// ServerURL is CI_SERVER_URL as the configuration's rules see it (JOBAPI_EXTERNAL_URL).
	ServerURL string
	// Namespace is CI_PROJECT_NAMESPACE.
	Namespace string
}

// FromRef is a pipeline to create from the repository.
type FromRef struct {
	ProjectID int64
	// Ref is a branch or tag name ("main", "v1.2"), or a full refs/heads/… or refs/tags/…
	// name where a branch and a tag share a name.
	Ref string
	// SHA, when set, is the commit to build (a push event's): the ref is then taken as it is
	// spelled (a branch unless refs/tags/…) and not looked up. "": the ref's head now.
	SHA string
	// BeforeSHA is the ref's previous tip (a push's), for rules:changes; "": none.
	BeforeSHA string
	// Source is CI_PIPELINE_SOURCE: builds.SourceAPI ("" too), SourceWeb, SourceTrigger,
	// SourceSchedule, SourcePush.
	Source string
	// Variables are the pipeline's own variables (over the project's).
	Variables []builds.Variable
	// TimeoutStrategy is jobapi's stuck-stage strategy ("": pessimistic).
	TimeoutStrategy string
	// ServerURL overrides the Creator's for this pipeline (the API's request host when no
	// external URL is set); "": the Creator's.
	ServerURL string
}

// Compiled is a pipeline compiled from the repository, not yet stored.
type Compiled struct {
	Definition builds.PipelineDefinition
	Head       cisource.Head // the ref and commit it was read at
	ConfigPath string        // the file read
	Result     ciconfig.Result
}

// FromRef compiles req's pipeline from the repository and creates it (Compile, then
// builds.Service.CreatePipeline), then cancels the pipelines it makes redundant (GitLab's
// auto-cancel). Errors as Compile's, and the service's.
func (c *Creator) FromRef(ctx context.Context, req FromRef) (builds.Pipeline, error) {
	compiled, err := c.Compile(ctx, req)
	if err != nil {
		return builds.Pipeline{}, err
	}
	p, err := c.Service.CreatePipeline(ctx, compiled.Definition)
	if err != nil {
		return builds.Pipeline{}, err
	}
	// Once the new pipeline is committed; a caller that goes away does not stop it halfway.
	c.Service.CancelRedundant(context.WithoutCancel(ctx), p)
	return p, nil
}

// Compile resolves req's ref, reads the configuration at its commit and compiles it. Every
// error about the request, the project or its repository is a *ciconfig.Error naming what
// is wrong (Transient when the remote could not be read now); ciconfig.ErrFilteredOut and
// ErrNoJobs when rules leave nothing to run; builds.ErrUnavailable and the like when the
// project cannot be read.
func (c *Creator) Compile(ctx context.Context, req FromRef) (Compiled, error) {
	if req.Ref == "" {
		return Compiled{}, &ciconfig.Error{Message: "ref is missing: the branch or tag to run the pipeline for"}
	}
	if err := gitref.CheckRevisions(req.Ref, req.SHA, req.BeforeSHA); err != nil {
		return Compiled{}, &ciconfig.Error{Message: err.Error()}
	}
	jp, err := c.Service.ProjectForPipeline(ctx, req.ProjectID)
	if err != nil {
		return Compiled{}, err
	}
	if jp.Project == nil || jp.Project.RepoURL == "" {
		return Compiled{}, &ciconfig.Error{Message: fmt.Sprintf(
			"project %d has no repository to read %s from: set its repo_url, or post the configuration itself", req.ProjectID, DefaultConfigPath)}
	}
	if c.Sources == nil || c.Sources.Git == nil {
		return Compiled{}, &ciconfig.Error{Message: "this server reads no repositories: post the configuration itself"}
	}
	remote := jp.Project.RepoURL
	head := cisource.Head{Ref: req.Ref, SHA: req.SHA}
	if req.SHA == "" {
		if head, err = c.Sources.Git.Head(ctx, remote, req.Ref); err != nil {
			return Compiled{}, sourceError(err)
		}
	}
	path := DefaultConfigPath
	if jp.Project.CIConfigPath != "" {
		path = jp.Project.CIConfigPath
	}
	src, err := c.Sources.Git.Read(ctx, remote, head.SHA, path)
	switch {
	case errors.Is(err, ciconfig.ErrIncludeNotFound):
		return Compiled{}, &ciconfig.Error{Message: fmt.Sprintf("Missing CI config file: %s is not in the project's repository at %s (commit %s)",
			path, req.Ref, head.SHA)}
	case err != nil:
		return Compiled{}, sourceError(err)
	}
	ref := head.PipelineRef()
	serverURL := req.ServerURL
	if serverURL == "" {
		serverURL = c.ServerURL
	}
	o := ciconfig.Origin{ProjectID: req.ProjectID, Project: jp, Ref: ref, SHA: head.SHA, BeforeSHA: req.BeforeSHA,
		Source: req.Source, ServerURL: serverURL, Namespace: c.Namespace, Variables: req.Variables}
	cctx := o.Context()
	files := c.Sources.For(ctx, remote, head.SHA)
	cctx.Includes, cctx.Repository = files, files
	res, err := ciconfig.Compile(src, cctx)
	if err != nil {
		return Compiled{}, err
	}
	def := builds.PipelineDefinition{ProjectID: req.ProjectID, Ref: ref, SHA: head.SHA, BeforeSHA: req.BeforeSHA,
		Source: req.Source, Variables: req.Variables, TimeoutStrategy: req.TimeoutStrategy, Stages: res.Stages, Jobs: res.Jobs, AutoCancel: res.AutoCancel}
	return Compiled{Definition: def, Head: head, ConfigPath: path, Result: res}, nil
}

// sourceError is a failure to read the repository as the user's error to act on.
func sourceError(err error) error {
	var ie *ciconfig.IncludeError
	if errors.As(err, &ie) {
		return &ciconfig.Error{Message: ie.Message, Transient: ie.Transient}
	}
	return err
}
