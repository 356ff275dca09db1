// Operator API, project CI/CD variables: developers read and write the unprotected ones,
// maintainers the protected ones too (builds/access); a protected variable is left out of a
// list for a caller who may not read it, and refused by name.

package handlers

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/projects"
)

// protectedVariableAccess refuses a protected variable to a caller whose role may not read
// (write) protected variables; an unprotected one passes (its route checked the role).
func protectedVariableAccess(ctx context.Context, protected, write bool) error {
	if !protected {
		return nil
	}
	action := access.ReadProtectedVariables
	if write {
		action = access.WriteProtectedVariables
	}
	a, _ := builds.ActorFrom(ctx)
	if access.Decide(a, callerLevel(ctx), action) != access.Allow {
		return &httpError{code: http.StatusForbidden, msg: "403 Forbidden - protected variables are for maintainers and owners"}
	}
	return nil
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

func variableView(v builds.ProjectVariable) api.ProjectVariable {
	return api.ProjectVariable{Key: v.Key, Value: v.Value, Masked: v.Masked, Protected: v.Protected,
		VariableType: v.VariableType, EnvironmentScope: "*"}
}

func (f variableFields) change() (projects.VariableChange, error) {
	if f.EnvironmentScope != nil && *f.EnvironmentScope != "*" {
		return projects.VariableChange{}, badRequest("environment_scope: jobapi has no environments; only \"*\" is accepted")
	}
	c := projects.VariableChange{Value: f.Value, VariableType: f.VariableType}
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
	vars, err := h.prj.ProjectVariables(r.Context(), id)
	if err != nil {
		return projectError(err)
	}
	readable := vars[:0]
	for _, v := range vars {
		if protectedVariableAccess(r.Context(), v.Protected, false) == nil {
			readable = append(readable, v)
		}
	}
	vars = readable
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
	v, err := h.prj.ProjectVariable(r.Context(), id, chi.URLParam(r, "key"))
	if err != nil {
		return projectError(err)
	}
	if err := protectedVariableAccess(r.Context(), v.Protected, false); err != nil {
		return err
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
	if err := protectedVariableAccess(r.Context(), c.Protected != nil && *c.Protected, true); err != nil {
		return err
	}
	v, err := h.prj.CreateProjectVariable(r.Context(), id, *f.Key, c)
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
	if err := protectedVariableAccess(r.Context(), c.Protected != nil && *c.Protected, true); err != nil {
		return err
	}
	ctx := r.Context()
	c.Guard = func(old builds.ProjectVariable) error { return protectedVariableAccess(ctx, old.Protected, true) }
	v, err := h.prj.UpdateProjectVariable(r.Context(), id, key, c)
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
	// Read first: a developer may not delete a protected variable. A variable protected
	// between this read and the delete is deleted; the change it races was a maintainer's.
	v, err := h.prj.ProjectVariable(r.Context(), id, chi.URLParam(r, "key"))
	if err != nil {
		return projectError(err)
	}
	if err := protectedVariableAccess(r.Context(), v.Protected, true); err != nil {
		return err
	}
	if err := h.prj.DeleteProjectVariable(r.Context(), id, chi.URLParam(r, "key")); err != nil {
		return projectError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
