// Operator API, pipelines: a member's personal access token, or an administrator's (or the
// admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in
// routes.go) decides by the caller's role (builds/access).

package handlers

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
)

func pipelineView(p builds.Pipeline) api.Pipeline {
	out := api.Pipeline{ID: p.ID, IID: p.IID, ProjectID: p.ProjectID, Ref: p.Ref, Sha: p.SHA, BeforeSha: p.BeforeSHA,
		Source: p.Source, Status: p.Status, Stages: p.Stages,
		TimeoutStrategy: p.TimeoutStrategy, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, FinishedAt: p.FinishedAt,
		Jobs: make([]api.PipelineJob, len(p.Builds)), Variables: make([]api.PipelineVariable, len(p.Variables))}
	for i, v := range p.Variables {
		out.Variables[i] = api.PipelineVariable{Key: v.Key, VariableType: builds.VariableEnv}
		if v.File {
			out.Variables[i].VariableType = builds.VariableFile
		}
	}
	for i, b := range p.Builds {
		out.Jobs[i] = api.PipelineJob{ID: b.ID, Name: b.Name, Stage: b.Stage, Status: string(b.Status),
			Attempt: b.Attempt, RetryOf: nonZero(b.RetryOf), RetriedBy: nonZero(b.RetriedBy), Bridge: b.Bridge}
	}
	out.ParentPipelineID, out.ParentJobID = nonZero(p.ParentPipelineID), nonZero(p.ParentBuildID)
	_, out.Tag = gitref.Split(p.Ref)
	if c, ok := p.Coverage(); ok {
		s := strconv.FormatFloat(c, 'f', 2, 64)
		out.Coverage = &s
	}
	return out
}

func nonZero(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func (h *Handler) createPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	if isForm(r) {
		// GitLab's form encodings (curl --data, -F) name a ref: a pipeline from the
		// repository. Definitions and ci_config come as JSON or application/yaml.
		req, err := formPipelineRequest(r)
		if err != nil {
			return err
		}
		return h.createPipelineFromRef(w, r, pid, req)
	}
	if req, ok, err := refOnlyQuery(r); err != nil || ok {
		if err != nil {
			return err
		}
		return h.createPipelineFromRef(w, r, pid, req)
	}
	var def builds.PipelineDefinition
	fromYAML := isYAML(r)
	if fromYAML {
		req, err := yamlRequest(r)
		if err != nil {
			return err
		}
		if def, _, err = h.compile(r, pid, req); err != nil {
			return err
		}
	} else {
		var req pipelineRequest
		if err := decodeJSON(r, &req, true); err != nil {
			return err
		}
		if req = req.withQueryRef(r); req.fromRepository() {
			return h.createPipelineFromRef(w, r, pid, req)
		}
		if req.CIConfig != nil {
			if len(req.Stages) > 0 || len(req.Jobs) > 0 {
				return badRequest("send either ci_config (.gitlab-ci.yml text) or stages and jobs, not both")
			}
			ci := ciRequest{Ref: req.Ref, SHA: req.Sha, Config: []byte(*req.CIConfig), TimeoutStrategy: req.TimeoutStrategy,
				Origin: req.pipelineOrigin}
			if def, _, err = h.compile(r, pid, ci); err != nil {
				return err
			}
			fromYAML = true
		} else {
			def = req.definition(pid)
		}
	}
	ref := def.Ref
	if ref == "" {
		ref = "main" // PipelineDefinition.Normalize's default
	}
	if err := h.mayRunOn(r.Context(), pid, ref); err != nil {
		return err
	}
	p, err := h.svc.CreatePipeline(r.Context(), def)
	if err != nil {
		return err
	}
	if fromYAML {
		// GitLab's auto-cancel of redundant pipelines, once the new one is committed; a
		// client that goes away does not stop it halfway.
		h.svc.CancelRedundant(context.WithoutCancel(r.Context()), p)
	}
	out := h.pipelineView(r, p)
	if out.GitStrategy, err = h.gitStrategy(r, pid); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (h *Handler) pipeline(r *http.Request) (builds.Pipeline, error) {
	pid, err := projectID(r)
	if err != nil {
		return builds.Pipeline{}, err
	}
	id, err := pathID(r, "pipeline_id")
	if err != nil {
		return builds.Pipeline{}, err
	}
	return h.svc.Pipeline(r.Context(), pid, id)
}

func (h *Handler) getPipeline(w http.ResponseWriter, r *http.Request) error {
	p, err := h.pipeline(r)
	if err != nil {
		return err
	}
	out := h.pipelineView(r, p)
	if out.GitStrategy, err = h.gitStrategy(r, p.ProjectID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getPipelineJobs pages like every list endpoint (SPEC §7): a pipeline of thousands of
// jobs would otherwise be one response of megabytes. As GitLab, it lists the latest attempt
// of each job unless include_retried=true, in the states scope[] names.
func (h *Handler) getPipelineJobs(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	scopes, err := jobScopes(r.URL.Query())
	if err != nil {
		return err
	}
	withRetried := false
	if v := r.URL.Query().Get("include_retried"); v != "" {
		if withRetried, err = parseBool(v); err != nil {
			return badRequest("include_retried: expected true or false, got %.40q", v)
		}
	}
	p, err := h.pipeline(r)
	if err != nil {
		return err
	}
	// GitLab lists a pipeline's trigger jobs apart (…/bridges), not among its jobs.
	jobsOnly := slices.DeleteFunc(p.Builds, func(b builds.Build) bool {
		return b.Bridge || b.RetriedBy != 0 && !withRetried || len(scopes) > 0 && !slices.Contains(scopes, b.Status)
	})
	from := min((pg.Page-1)*pg.PerPage, len(jobsOnly))
	to := min(from+pg.PerPage, len(jobsOnly))
	views := make([]builds.JobView, 0, to-from)
	for _, b := range jobsOnly[from:to] {
		views = append(views, builds.JobView{Build: b})
	}
	if err := h.arts.WithArtifacts(r.Context(), views); err != nil {
		return err
	}
	jobs, err := h.jobDetails(r, views)
	if err != nil {
		return err
	}
	writePage(w, pg, len(jobsOnly), jobs)
	return nil
}

// getPipelineBridges is GitLab's GET /projects/:id/pipelines/:pipeline_id/bridges: the
// pipeline's trigger jobs with their downstream (child) pipelines, paged.
func (h *Handler) getPipelineBridges(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	pid, id, err := projectAndID(r, "pipeline_id")
	if err != nil {
		return err
	}
	p, err := h.svc.Pipeline(r.Context(), pid, id)
	if err != nil {
		return err
	}
	list, err := h.svc.Bridges(r.Context(), pid, id)
	if err != nil {
		return err
	}
	from := min((pg.Page-1)*pg.PerPage, len(list))
	to := min(from+pg.PerPage, len(list))
	out := make([]api.Bridge, 0, to-from)
	for _, v := range list[from:to] {
		out = append(out, bridgeView(p, v))
	}
	writePage(w, pg, len(list), out)
	return nil
}

func bridgeView(p builds.Pipeline, v builds.BridgeView) api.Bridge {
	b := v.Build
	name, refType := splitRef(p.Ref)
	out := api.Bridge{ID: b.ID, Name: b.Name, Stage: b.Stage, Status: string(b.Status), Ref: name, Tag: refType == "tag",
		AllowFailure: b.AllowFailure, CreatedAt: b.CreatedAt, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt,
		Attempt: b.Attempt, RetryOf: nonZero(b.RetryOf), RetriedBy: nonZero(b.RetriedBy),
		Pipeline: api.BridgePipeline{ID: p.ID, IID: p.IID, ProjectID: p.ProjectID, Sha: p.SHA, Ref: p.Ref,
			Status: p.Status, Source: p.Source, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}}
	if out.StartedAt != nil && b.QueuedAt != nil {
		q := out.StartedAt.Sub(*b.QueuedAt).Seconds()
		out.QueuedDuration = &q
	}
	if out.StartedAt != nil && b.FinishedAt != nil {
		d := b.FinishedAt.Sub(*out.StartedAt).Seconds()
		out.Duration = &d
	}
	if b.FailureReason != "" {
		reason := b.FailureReason
		out.FailureReason = &reason
	}
	if t := b.Payload.Trigger; t != nil {
		for _, inc := range t.Include {
			out.Trigger.Include = append(out.Trigger.Include, inc.Local)
		}
		if t.Strategy != "" {
			s := t.Strategy
			out.Trigger.Strategy = &s
		}
	}
	if d := v.Downstream; d != nil {
		out.DownstreamPipeline = &api.BridgePipeline{ID: d.ID, IID: d.IID, ProjectID: d.ProjectID, Sha: d.SHA,
			Ref: d.Ref, Status: d.Status, Source: d.Source, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	}
	return out
}

func (h *Handler) cancelPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "pipeline_id")
	if err != nil {
		return err
	}
	p, err := h.svc.CancelPipeline(r.Context(), pid, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.pipelineView(r, p))
	return nil
}

// maxWaitSeconds bounds one wait request; callers loop on jobs_remaining.
const maxWaitSeconds = int(builds.MaxWait / time.Second)

func (h *Handler) waitPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "pipeline_id")
	if err != nil {
		return err
	}
	timeout := 30
	if v := r.URL.Query().Get("timeout"); v != "" {
		timeout, err = strconv.Atoi(v)
		if err != nil || timeout < 0 || timeout > maxWaitSeconds {
			return badRequest("timeout must be whole seconds from 0 to %d", maxWaitSeconds)
		}
	}
	res, err := h.svc.WaitPipeline(r.Context(), pid, id, time.Duration(timeout)*time.Second)
	if err != nil {
		return err
	}
	if res.Finished == nil {
		res.Finished = []int64{}
	}
	writeJSON(w, http.StatusOK, api.PipelineWait{Status: res.Status, JobsRemaining: res.JobsRemaining, Finished: res.Finished})
	return nil
}
