package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// ProjectNamespace is the one namespace jobapi has: CI_PROJECT_PATH is jobapi/<path>.
const ProjectNamespace = "jobapi"

const projectNamespace = ProjectNamespace

// projectFields is the body of POST /projects and PUT /projects/:id.
type projectFields struct {
	Name          *string `json:"name"`
	Path          *string `json:"path"`
	RepoURL       *string `json:"repo_url"`
	DefaultBranch *string `json:"default_branch"`
}

// variableFields is the body of POST and PUT /projects/:id/variables[/:key].
type variableFields struct {
	Key          *string  `json:"key"`
	Value        *string  `json:"value"`
	Masked       *boolish `json:"masked"`
	Protected    *boolish `json:"protected"`
	VariableType *string  `json:"variable_type"`
	// GitLab's; jobapi has no environments, so only "*" is accepted.
	EnvironmentScope *string `json:"environment_scope"`
}

// decodeBody reads a JSON or form body into v (unknown fields refused). A form becomes a
// JSON object of strings first: the boolish fields accept "true"/"false" as GitLab does.
func decodeBody(r *http.Request, v any) error {
	if !isForm(r) {
		return decodeJSON(r, v, true)
	}
	if err := r.ParseForm(); err != nil {
		return badRequest("malformed form body: %s", err.Error())
	}
	return decodeValues(r.PostForm, v)
}

// decodeValues decodes form (or query) values into v as decodeBody does a form body.
func decodeValues(values url.Values, v any) error {
	m := make(map[string]string, len(values))
	for k, vals := range values {
		m[k] = vals[len(vals)-1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var he *httpError
		if errors.As(err, &he) {
			return he
		}
		return badRequest("malformed form body: %s", err.Error())
	}
	return nil
}

func (f projectFields) change() builds.ProjectChange {
	return builds.ProjectChange{Name: f.Name, Path: f.Path, RepoURL: f.RepoURL, DefaultBranch: f.DefaultBranch}
}

func projectView(p builds.Project) api.Project {
	return api.Project{ID: p.ID, Name: p.Name, Path: p.Path, PathWithNamespace: projectNamespace + "/" + p.Path,
		RepoURL: builds.RedactURL(p.RepoURL), DefaultBranch: p.DefaultBranch, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

func variableView(v builds.ProjectVariable) api.ProjectVariable {
	return api.ProjectVariable{Key: v.Key, Value: v.Value, Masked: v.Masked, Protected: v.Protected,
		VariableType: v.VariableType, EnvironmentScope: "*"}
}

// projectError words the project sentinels for the client.
func projectError(err error) error {
	switch {
	case errors.Is(err, builds.ErrExists):
		return badRequest("%s", err.Error())
	case errors.Is(err, builds.ErrProjectBusy):
		return &httpError{code: http.StatusConflict, msg: err.Error()}
	case errors.Is(err, builds.ErrNotFound):
		return &httpError{code: http.StatusNotFound, msg: "404 " + err.Error()}
	}
	return err
}

func (h *Handler) createProject(w http.ResponseWriter, r *http.Request) error {
	var f projectFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	p, err := h.svc.CreateProject(r.Context(), f.change(), actor(r))
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
	list, total, err := h.svc.Projects(r.Context(), pg)
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
	p, err := h.svc.Project(r.Context(), id)
	if err != nil {
		return projectError(err)
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
	p, err := h.svc.UpdateProject(r.Context(), id, f.change(), actor(r))
	if err != nil {
		return projectError(err)
	}
	writeJSON(w, http.StatusOK, projectView(p))
	return nil
}

func (h *Handler) deleteProject(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	if err := h.svc.DeleteProject(r.Context(), id, actor(r)); err != nil {
		return projectError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (f variableFields) change() (builds.VariableChange, error) {
	if f.EnvironmentScope != nil && *f.EnvironmentScope != "*" {
		return builds.VariableChange{}, badRequest("environment_scope: jobapi has no environments; only \"*\" is accepted")
	}
	c := builds.VariableChange{Value: f.Value, VariableType: f.VariableType}
	if f.Masked != nil {
		v := bool(*f.Masked)
		c.Masked = &v
	}
	if f.Protected != nil {
		v := bool(*f.Protected)
		c.Protected = &v
	}
	return c, nil
}

// variablePage lists a project's variables, paged like every list (a project has few).
func (h *Handler) listVariables(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	vars, err := h.svc.ProjectVariables(r.Context(), id)
	if err != nil {
		return projectError(err)
	}
	from := min((pg.Page-1)*pg.PerPage, len(vars))
	to := min(from+pg.PerPage, len(vars))
	out := make([]api.ProjectVariable, 0, to-from)
	for _, v := range vars[from:to] {
		out = append(out, variableView(v))
	}
	writePage(w, pg, len(vars), out)
	return nil
}

func (h *Handler) getVariable(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	v, err := h.svc.ProjectVariable(r.Context(), id, chi.URLParam(r, "key"))
	if err != nil {
		return projectError(err)
	}
	writeJSON(w, http.StatusOK, variableView(v))
	return nil
}

func (h *Handler) createVariable(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	var f variableFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	if f.Key == nil {
		return badRequest("key is required")
	}
	c, err := f.change()
	if err != nil {
		return err
	}
	v, err := h.svc.CreateProjectVariable(r.Context(), id, *f.Key, c, actor(r))
	if err != nil {
		return projectError(err)
	}
	writeJSON(w, http.StatusCreated, variableView(v))
	return nil
}

func (h *Handler) updateVariable(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	key := chi.URLParam(r, "key")
	var f variableFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	if f.Key != nil && *f.Key != key {
		return badRequest("key cannot be changed (the path names %.60q)", key)
	}
	c, err := f.change()
	if err != nil {
		return err
	}
	v, err := h.svc.UpdateProjectVariable(r.Context(), id, key, c, actor(r))
	if err != nil {
		return projectError(err)
	}
	writeJSON(w, http.StatusOK, variableView(v))
	return nil
}

func (h *Handler) deleteVariable(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	if err := h.svc.DeleteProjectVariable(r.Context(), id, chi.URLParam(r, "key"), actor(r)); err != nil {
		return projectError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// gitStrategy is what a pipeline of the project clones with by default: none when the
// project has no repository (implicit projects included).
func (h *Handler) gitStrategy(r *http.Request, projectID int64) (string, error) {
	p, err := h.svc.Project(r.Context(), projectID)
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
