package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/listings"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/cisource"
	"github.com/jobapi/jobapi/gitref"
)

// GitLab's read and control calls on a project's pipelines: the list with its filters, the
// latest of a ref, a pipeline's variables, retry and delete.

// listPipelines is GitLab's GET /projects/:id/pipelines: newest first by default, paged,
// each pipeline in GitLab's short form (no jobs).
func (h *Handler) listPipelines(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	f, err := pipelineFilterOf(r.URL.Query())
	if err != nil {
		return err
	}
	if err := h.requireProject(r, pid); err != nil {
		return err
	}
	list, total, err := h.lists.ProjectPipelines(r.Context(), pid, f, pg)
	if err != nil {
		return err
	}
	base := h.externalBase(r)
	out := make([]api.PipelineBasic, len(list))
	for i, p := range list {
		ref, _ := refName(p.Ref)
		out[i] = api.PipelineBasic{ID: p.ID, IID: p.IID, ProjectID: p.ProjectID, Sha: p.SHA, Ref: ref, Status: p.Status,
			Source: p.Source, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, WebURL: pipelineWebURL(base, p)}
	}
	h.pageLinks(w, r, pg, total)
	writePage(w, pg, total, out)
	return nil
}

// pipelineFilterOf reads GitLab's filters; the service checks their values.
func pipelineFilterOf(q url.Values) (listings.PipelineQuery, error) {
	f := listings.PipelineQuery{Scope: q.Get("scope"), Status: q.Get("status"), Ref: q.Get("ref"), SHA: q.Get("sha"),
		Source: q.Get("source"), OrderBy: q.Get("order_by"), Sort: q.Get("sort")}
	for _, t := range []struct {
		name string
		to   **time.Time
	}{{"updated_after", &f.UpdatedAfter}, {"updated_before", &f.UpdatedBefore}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		at, err := parseISOTime(v)
		if err != nil {
			return f, badRequest("%s is invalid: want an ISO 8601 time such as 2019-03-15T08:00:00Z, got %.40q", t.name, v)
		}
		*t.to = &at
	}
	return f, nil
}

// parseISOTime reads the ISO 8601 forms GitLab's API takes: a time with its zone, or a date
// (midnight UTC).
func parseISOTime(v string) (time.Time, error) {
	if at, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return at, nil
	}
	return time.Parse("2006-01-02", v)
}

// latestPipeline is GitLab's GET /projects/:id/pipelines/latest?ref=…: the newest pipeline
// for the most recent commit of the ref (the default branch without one), with GitLab's
// single-pipeline fields. GitLab reads the ref's head in the project's repository and
// looks for a pipeline of the ref at that commit; none is its 403 (the pipeline it would
// authorize is nil). jobapi reads the head on the project's remote (git ls-remote, as a
// pipeline from the ref does); a project without a repository (its pipelines posted) has
// no head to read, and its newest pipeline of the ref is answered, as before.
func (h *Handler) latestPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	if err := h.requireProject(r, pid); err != nil {
		return err
	}
	ref := r.URL.Query().Get("ref")
	head, ok, err := h.refHead(r, pid, ref)
	if err != nil {
		return err
	}
	if !ok {
		p, err := h.lists.LatestPipeline(r.Context(), pid, ref, "")
		if err != nil {
			return err
		}
		return h.writePipeline(w, r, http.StatusOK, p)
	}
	p, err := h.lists.LatestPipeline(r.Context(), pid, head.PipelineRef(), head.SHA)
	if errors.Is(err, builds.ErrNotFound) {
		return &httpError{code: http.StatusForbidden, msg: fmt.Sprintf("403 Forbidden - no pipeline of %s for its most recent commit %s",
			head.PipelineRef(), head.SHA)}
	}
	if err != nil {
		return err
	}
	return h.writePipeline(w, r, http.StatusOK, p)
}

// refHead is the head commit of ref ("": the project's default branch) on the project's
// remote, or ok false when the project has no repository to read (or this server reads
// none). An unknown ref, an unreadable remote: the *ciconfig.Error a pipeline from the ref
// would get.
func (h *Handler) refHead(r *http.Request, pid int64, ref string) (cisource.Head, bool, error) {
	if h.includes == nil || h.includes.Git == nil {
		return cisource.Head{}, false, nil
	}
	jp, err := h.svc.ProjectForPipeline(r.Context(), pid)
	if err != nil {
		return cisource.Head{}, false, err
	}
	if jp.Project == nil || jp.Project.RepoURL == "" {
		return cisource.Head{}, false, nil
	}
	if ref == "" {
		ref = jp.Project.DefaultBranch
	}
	if err := gitref.CheckRevisions(ref, "", ""); err != nil {
		return cisource.Head{}, false, err
	}
	head, err := h.includes.Git.Head(r.Context(), jp.Project.RepoURL, ref)
	if err != nil {
		var ie *ciconfig.IncludeError
		if errors.As(err, &ie) {
			return cisource.Head{}, false, &ciconfig.Error{Message: ie.Message, Transient: ie.Transient}
		}
		return cisource.Head{}, false, err
	}
	return head, true, nil
}

// pipelineView is pipelineView(p) with GitLab's fields that need the clock and the request:
// the durations as views.PipelineDurations counts them (the jobs' run periods joined, to
// now while one runs; queued from creation to the first start), started_at and web_url.
func (h *Handler) pipelineView(r *http.Request, p builds.Pipeline) api.Pipeline {
	out := pipelineView(p)
	out.WebURL = pipelineWebURL(h.externalBase(r), p)
	d := views.PipelineDurations(p, h.svc.Now())
	if d.Run != nil {
		secs := int64(*d.Run / time.Second)
		out.Duration = &secs
	}
	if d.Queued != nil {
		secs := d.Queued.Seconds()
		out.QueuedDuration = &secs
	}
	out.StartedAt = views.RunsOf(p).FirstStarted
	out.User = userView(h.externalBase(r), p.CreatedBy)
	return out
}

// pipelineWebURL is the pipeline's page in the web UI.
func pipelineWebURL(base string, p builds.Pipeline) string {
	return fmt.Sprintf("%s/projects/%d/pipelines/%d", base, p.ProjectID, p.ID)
}

// writePipeline answers one pipeline in the shape of GET …/pipelines/:id.
func (h *Handler) writePipeline(w http.ResponseWriter, r *http.Request, code int, p builds.Pipeline) error {
	out := h.pipelineView(r, p)
	var err error
	if out.GitStrategy, err = h.gitStrategy(r, p.ProjectID); err != nil {
		return err
	}
	writeJSON(w, code, out)
	return nil
}

// getPipelineVariables is GitLab's GET …/pipelines/:id/variables: the pipeline's own
// variables with their values, as GitLab shows them (the pipeline object lists only their
// keys and types).
func (h *Handler) getPipelineVariables(w http.ResponseWriter, r *http.Request) error {
	p, err := h.pipeline(r)
	if err != nil {
		return err
	}
	out := make([]api.PipelineVariableValue, len(p.Variables))
	for i, v := range p.Variables {
		out[i] = api.PipelineVariableValue{Key: v.Key, Value: v.Value, VariableType: builds.VariableEnv}
		if v.File {
			out[i].VariableType = builds.VariableFile
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// retryPipeline is GitLab's POST …/pipelines/:id/retry: its failed and canceled jobs run
// again; 201 with the pipeline, as GitLab answers.
func (h *Handler) retryPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "pipeline_id")
	if err != nil {
		return err
	}
	p, err := h.svc.RetryPipeline(r.Context(), pid, id)
	if err != nil {
		return err
	}
	return h.writePipeline(w, r, http.StatusCreated, p)
}

// deletePipeline is GitLab's DELETE …/pipelines/:id: 204, the pipeline gone with its jobs,
// logs and artifacts. A pipeline with a job not finished is a 409: cancel it first.
func (h *Handler) deletePipeline(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "pipeline_id")
	if err != nil {
		return err
	}
	err = h.svc.DeletePipeline(r.Context(), pid, id)
	if errors.Is(err, builds.ErrPipelineBusy) {
		return &httpError{code: http.StatusConflict, msg: "409 Conflict - " + builds.ErrPipelineBusy.Error()}
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
