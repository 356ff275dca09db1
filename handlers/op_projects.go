// Operator API, projects: a member's personal access token, or an administrator's (or the admin
// token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in routes.go)
// decides by the caller's role (builds/access). Creating a project is administrators'.

package handlers

import (
	"errors"
	"net/http"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/gitremote"
)

// ProjectNamespace is the one namespace jobapi has: CI_PROJECT_PATH is jobapi/<path>.
const ProjectNamespace = projects.Namespace

const projectNamespace = ProjectNamespace

// projectFields is the body of POST /projects and PUT /projects/:id.
type projectFields struct {
	Name          *string `json:"name"`
	Path          *string `json:"path"`
	RepoURL       *string `json:"repo_url"`
	DefaultBranch *string `json:"default_branch"`
	CIConfigPath  *string `json:"ci_config_path"`
}

func (f projectFields) change() projects.ProjectChange {
	return projects.ProjectChange{Name: f.Name, Path: f.Path, RepoURL: f.RepoURL, DefaultBranch: f.DefaultBranch,
		CIConfigPath: f.CIConfigPath}
}

func projectView(p builds.Project) api.Project {
	return api.Project{ID: p.ID, Name: p.Name, Path: p.Path, PathWithNamespace: projectNamespace + "/" + p.Path,
		RepoURL: gitremote.Redact(p.RepoURL), DefaultBranch: p.DefaultBranch, CIConfigPath: p.CIConfigPath, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

// projectError words the project sentinels for the client.
func projectError(err error) error {
	switch {
	case errors.Is(err, builds.ErrExists):
		return badRequest("%s", err.Error())
	case errors.Is(err, projects.ErrProjectBusy):
		return &httpError{code: http.StatusConflict, msg: err.Error()}
	case errors.Is(err, builds.ErrNotFound):
		return &httpError{code: http.StatusNotFound, msg: "404 " + err.Error()}
	}
	return err
}

// noSuchProject words a project that is not there as GitLab does ("404 Project Not
// Found"), without its id: the id of a path no project has is a stand-in (projectPaths).
func noSuchProject(err error) error {
	if errors.Is(err, builds.ErrNotFound) {
		return &httpError{code: http.StatusNotFound, msg: "404 Project Not Found"}
	}
	return err
}

func (h *Handler) createProject(w http.ResponseWriter, r *http.Request) error {
	var f projectFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	p, err := h.prj.CreateProject(r.Context(), f.change())
	if err != nil {
		return projectError(err)
	}
	writeJSON(w, http.StatusCreated, projectView(p))
	return nil
}

func (h *Handler) listProjects(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	// An admin sees every project; anyone else the projects it is a member of (GitLab's
	// membership=true, which for a private instance is all a user can see).
	var list []builds.Project
	var total int
	switch a, _ := builds.ActorFrom(r.Context()); {
	case a.Admin:
		list, total, err = h.prj.Projects(r.Context(), pg)
	case h.access != nil && a.Kind == builds.ActorUser:
		list, total, err = h.access.MemberProjects(r.Context(), a.UserID, pg)
	}
	if err != nil {
		return err
	}
	out := make([]api.Project, len(list))
	for i, p := range list {
		out[i] = projectView(p)
	}
	writePage(w, pg, total, out)
	return nil
}

func (h *Handler) getProject(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	p, err := h.prj.Project(r.Context(), id)
	if err != nil {
		return projectError(noSuchProject(err))
	}
	writeJSON(w, http.StatusOK, projectView(p))
	return nil
}

func (h *Handler) updateProject(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	var f projectFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	p, err := h.prj.UpdateProject(r.Context(), id, f.change())
	if err != nil {
		return projectError(noSuchProject(err))
	}
	writeJSON(w, http.StatusOK, projectView(p))
	return nil
}

func (h *Handler) deleteProject(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	if err := h.prj.DeleteProject(r.Context(), id); err != nil {
		return projectError(noSuchProject(err))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// gitStrategy is what a pipeline of the project clones with by default: none when the
// project has no repository (implicit projects included).
func (h *Handler) gitStrategy(r *http.Request, projectID int64) (string, error) {
	p, err := h.prj.Project(r.Context(), projectID)
	switch {
	case errors.Is(err, builds.ErrNotFound):
		return "none", nil
	case err != nil:
		return "", err
	case p.RepoURL == "":
		return "none", nil
	}
	return "fetch", nil
}
