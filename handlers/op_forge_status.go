package handlers

// Where a project's commit statuses go, /projects/:id/forge_status (jobapi's own: GitLab
// reports to itself), and their delivery log: a maintainer's
// (manage_hooks in builds/access) or an administrator's token. The forge's token is
// written, never read.

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/forgestatus"
	"github.com/jobapi/jobapi/builds/hooks"
)

func forgeStatusView(s forgestatus.Settings) api.ForgeStatus {
	return api.ForgeStatus{Forge: s.Forge, APIURL: s.APIURL, Repository: s.Repository, Context: s.Context,
		TokenPresent: s.Token != "", CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func (h *Handler) getForgeStatus(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	s, err := h.hooks.ForgeStatus(r.Context(), pid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, forgeStatusView(s))
	return nil
}

func (h *Handler) putForgeStatus(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	var req struct {
		Forge      *string `json:"forge"`
		APIURL     *string `json:"api_url"`
		Repository *string `json:"repository"`
		Token      *string `json:"token"`
		Context    *string `json:"context"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	s, err := h.hooks.PutForgeStatus(r.Context(), pid, forgestatus.Change{Forge: req.Forge, APIURL: req.APIURL,
		Repository: req.Repository, Token: req.Token, Context: req.Context})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, forgeStatusView(s))
	return nil
}

func (h *Handler) deleteForgeStatus(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	if err := h.hooks.DeleteForgeStatus(r.Context(), pid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listForgeStatusEvents is the log of a project's commit statuses, every attempt, newest first.
func (h *Handler) listForgeStatusEvents(w http.ResponseWriter, r *http.Request) error {
	list := func(ctx context.Context, pid int64, pg builds.Page) ([]hooks.LoggedAttempt, int, error) {
		return h.hooks.ForgeStatusAttempts(ctx, pid, pg)
	}
	return writeProjectPage(w, r, list, hookEventView)
}

// forgeStatusRoutes are the commit status routes of the operator API (PRIVATE-TOKEN).
func (h *Handler) forgeStatusRoutes(r chi.Router) {
	r = r.With(h.can(access.ManageHooks), h.needHooks)
	r.Get("/projects/{project_id}/forge_status", h.wrap(h.getForgeStatus))
	r.Put("/projects/{project_id}/forge_status", h.wrap(h.putForgeStatus))
	r.Delete("/projects/{project_id}/forge_status", h.wrap(h.deleteForgeStatus))
	r.Get("/projects/{project_id}/forge_status/events", h.wrap(h.listForgeStatusEvents))
}
