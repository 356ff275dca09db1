package webui

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/projects"
)

// gitlabPaths answers the pages at GitLab's paths, which the API's web_url and
// target_url, CI_PROJECT_URL, CI_JOB_URL and CI_PIPELINE_URL name as GitLab does
// (/jobapi/<path>/-/jobs/<id>), with a redirect to this UI's page of the same thing.
func (u *UI) gitlabPaths(r chi.Router) {
	base := "/" + projects.Namespace + "/{project_path}"
	r.Get(base, u.gitlabRedirect(""))
	r.Get(base+"/-/jobs/{id}", u.gitlabRedirect("jobs"))
	r.Get(base+"/-/pipelines/{id}", u.gitlabRedirect("pipelines"))
	r.Get(base+"/-/commit/{sha}", u.gitlabRedirect(""))
}

// gitlabRedirect sends a project member on to the page (the project's, or its job's or
// pipeline's when kind says so). Anyone else, and a path no project has, gets the same 404,
// so that the paths of projects one is no member of stay unknown.
func (u *UI) gitlabRedirect(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path := chi.URLParam(r, "project_path")
		notFound := func() {
			u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("There is no project %s/%s, or you are not a member of it.", projects.Namespace, path))
		}
		pid, err := u.projectIDByPath(r, path)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		if pid == 0 {
			notFound()
			return
		}
		d, _, err := u.decide(r.Context(), actorOf(r), pid, access.ReadPipelines)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		if d != access.Allow {
			notFound()
			return
		}
		to := fmt.Sprintf("/projects/%d", pid)
		if kind != "" {
			id, err := pathInt(r, "id")
			if err != nil {
				u.fail(w, r, err)
				return
			}
			to += fmt.Sprintf("/%s/%d", kind, id)
		}
		http.Redirect(w, r, to, http.StatusFound)
	}
}

// projectIDByPath is the project of a path (projects.Service.IDByPath), or 0.
func (u *UI) projectIDByPath(r *http.Request, path string) (int64, error) {
	if u.prj == nil {
		return 0, nil
	}
	id, _, err := u.prj.IDByPath(r.Context(), path)
	return id, err
}
