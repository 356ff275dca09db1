package handlers

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/listings"
	"github.com/jobapi/jobapi/gitref"
)

// listCommitStatuses is GitLab's GET /projects/:id/repository/commits/:sha/statuses: one
// entry per job of the project's pipelines at the commit, oldest first, the latest attempts
// unless all=true; filtered by ref, stage and name; paged. jobapi knows a commit only by its
// pipelines: a commit without any has no statuses (an empty list, where GitLab, which
// reads the repository, answers 404 for a commit it does not have).
func (h *Handler) listCommitStatuses(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	sha := chi.URLParam(r, "sha")
	// Pipelines carry full commit ids; GitLab would also resolve a branch name or a short
	// id here, from the repository jobapi does not keep.
	if err := gitref.CheckSHA("sha", sha); err != nil {
		return err
	}
	q := r.URL.Query()
	f := listings.CommitStatusFilter{ProjectID: pid, SHA: sha, Ref: q.Get("ref"), Stage: q.Get("stage"), Name: q.Get("name")}
	if v := q.Get("all"); v != "" {
		if f.All, err = parseBool(v); err != nil {
			return badRequest("all: expected true or false, got %.40q", v)
		}
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	if err := h.requireProject(r, pid); err != nil {
		return err
	}
	list, total, err := h.lists.CommitStatuses(r.Context(), f, pg)
	if err != nil {
		return err
	}
	base := h.externalBase(r)
	paths, err := h.lists.ProjectPaths(r.Context(), []int64{pid})
	if err != nil {
		return err
	}
	projectURL := projectWebURL(base, pid, paths)
	author := adminUser(base)
	out := make([]api.CommitStatus, len(list))
	for i, b := range list {
		ref, _ := refName(b.Ref)
		out[i] = api.CommitStatus{ID: b.ID, Sha: b.SHA, Ref: ref, Status: string(b.Status), Name: b.Name, Stage: b.Stage,
			TargetURL: fmt.Sprintf("%s/-/jobs/%d", projectURL, b.ID), CreatedAt: b.CreatedAt, StartedAt: b.StartedAt,
			FinishedAt: b.FinishedAt, AllowFailure: b.AllowFailure, Coverage: b.Coverage, PipelineID: b.PipelineID,
			Author: author}
	}
	writePage(w, pg, total, out)
	return nil
}
