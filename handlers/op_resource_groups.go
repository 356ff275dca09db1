// Operator API, resource groups: a member's personal access token, or an administrator's (or
// the admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in
// routes.go) decides by the caller's role (builds/access).

package handlers

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/resourcegroups"
)

// The resource groups API (GitLab's shapes): groups come from .gitlab-ci.yml's
// resource_group, created by the store with the pipeline that first names them.

func (h *Handler) listResourceGroups(w http.ResponseWriter, r *http.Request) error {
	return writeProjectPage(w, r, h.groups.ResourceGroups, resourceGroupView)
}

// groupOf reads the project id and the :key segment, which clients send URL-encoded (a
// key may hold slashes): every resource group route names both.
func groupOf(r *http.Request) (int64, string, error) {
	pid, err := projectID(r)
	if err != nil {
		return 0, "", err
	}
	key, err := url.PathUnescape(chi.URLParam(r, "key"))
	if err != nil {
		return 0, "", badRequest("key is not a valid URL-encoded value")
	}
	return pid, key, nil
}

func (h *Handler) getResourceGroup(w http.ResponseWriter, r *http.Request) error {
	pid, key, err := groupOf(r)
	if err != nil {
		return err
	}
	g, err := h.groups.ResourceGroup(r.Context(), pid, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resourceGroupView(g))
	return nil
}

// resourceGroupFields is PUT's body: GitLab's only attribute.
type resourceGroupFields struct {
	ProcessMode *string `json:"process_mode"`
}

func (h *Handler) updateResourceGroup(w http.ResponseWriter, r *http.Request) error {
	pid, key, err := groupOf(r)
	if err != nil {
		return err
	}
	var f resourceGroupFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	if f.ProcessMode == nil {
		return badRequest("process_mode is missing")
	}
	g, err := h.groups.SetProcessMode(r.Context(), pid, key, *f.ProcessMode)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resourceGroupView(g))
	return nil
}

func (h *Handler) upcomingJobs(w http.ResponseWriter, r *http.Request) error {
	pid, key, err := groupOf(r)
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	views, total, err := h.groups.UpcomingJobs(r.Context(), pid, key, pg)
	if err != nil {
		return err
	}
	jobs, err := h.jobDetails(r, views)
	if err != nil {
		return err
	}
	writePage(w, pg, total, jobs)
	return nil
}

func resourceGroupView(g resourcegroups.ResourceGroup) api.ResourceGroup {
	return api.ResourceGroup{ID: g.ID, Key: g.Key, ProcessMode: g.ProcessMode, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
}
