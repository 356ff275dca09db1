package webui

// A project's CI/CD variables: the list, create, edit and delete, through builds/projects as
// the API's /projects/:id/variables, with the same rules: developers read and write the
// unprotected ones (access.ReadVariables, WriteVariables, on the routes), maintainers the
// protected ones too (ReadProtectedVariables, WriteProtectedVariables, checked here on the
// variable): a protected variable is left out of a developer's list and refused by name. A
// masked variable's value is never put on a page, not even in its edit form: the form keeps
// the stored value unless a new one is typed.

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/projects"
)

type variablesData struct {
	ProjectID int64
	Rows      []variableRow
	// CanWrite: the user may add and change unprotected variables; CanProtect: protected
	// ones too (the form offers "protected" only then).
	CanWrite, CanProtect bool
	// Form is the create form, kept with its error when it was refused (a masked value
	// is not kept: it would be put back on the page).
	Form  variableForm
	Error string
}

type variableRow struct {
	builds.ProjectVariable
	CanWrite bool
}

type variableForm struct {
	Key, Value              string
	Masked, Protected, File bool
	// Existing: the edit form (the key is fixed; an empty value keeps the stored one).
	Existing bool
	// CanProtect: the form offers "protected" (maintainers and owners).
	CanProtect bool
}

type variableEditData struct {
	ProjectID int64
	Form      variableForm
	Error     string
}

// errProtectedVariable refuses a protected variable to a role below maintainer.
var errProtectedVariable = errors.New("protected variables are for maintainers and owners: your role may not change this one")

// mayProtected reports whether the user may read (write) a variable with this protection.
func (u *UI) mayProtected(r *http.Request, pid int64, protected, write bool) bool {
	if !protected {
		return true
	}
	action := access.ReadProtectedVariables
	if write {
		action = access.WriteProtectedVariables
	}
	return u.allowed(r, pid, action, "")
}

func (u *UI) variablesData(r *http.Request, pid int64) (variablesData, error) {
	d := variablesData{ProjectID: pid, CanWrite: u.allowed(r, pid, access.WriteVariables, ""),
		CanProtect: u.allowed(r, pid, access.WriteProtectedVariables, "")}
	d.Form.CanProtect = d.CanProtect
	vars, err := u.prj.ProjectVariables(r.Context(), pid)
	if err != nil {
		return d, err
	}
	for _, v := range vars {
		if !u.mayProtected(r, pid, v.Protected, false) {
			continue
		}
		if v.Masked {
			v.Value = "" // never rendered, not even by mistake
		}
		d.Rows = append(d.Rows, variableRow{ProjectVariable: v, CanWrite: d.CanWrite && u.mayProtected(r, pid, v.Protected, true)})
	}
	return d, nil
}

func (u *UI) renderVariables(w http.ResponseWriter, r *http.Request, status int, d variablesData) {
	u.render(w, r, status, "variables", view{Title: fmt.Sprintf("CI/CD variables of project %d", d.ProjectID), Nav: "projects", Data: d})
}

func (u *UI) variablesPage(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d, err := u.variablesData(r, pid)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.renderVariables(w, r, http.StatusOK, d)
}

// variableFormValues reads the form; a checkbox not sent is false (both forms send every
// checkbox they show).
func variableFormValues(r *http.Request) variableForm {
	return variableForm{Key: strings.TrimSpace(r.PostFormValue("key")), Value: r.PostFormValue("value"),
		Masked: r.PostFormValue("masked") == "on", Protected: r.PostFormValue("protected") == "on", File: r.PostFormValue("file") == "on"}
}

func (f variableForm) change() projects.VariableChange {
	c := projects.VariableChange{Masked: &f.Masked, Protected: &f.Protected}
	t := builds.VariableEnv
	if f.File {
		t = builds.VariableFile
	}
	c.VariableType = &t
	if f.Value != "" || !f.Existing {
		c.Value = &f.Value
	}
	return c
}

// variableRefusal is the message for a refused change the form can show, "" for another
// error.
func variableRefusal(err error) string {
	var inv *builds.ValidationError
	switch {
	case errors.As(err, &inv):
		return inv.Error()
	case errors.Is(err, builds.ErrExists):
		return err.Error()
	case errors.Is(err, errProtectedVariable):
		return errProtectedVariable.Error()
	}
	return ""
}

func (u *UI) createVariable(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	f := variableFormValues(r)
	refuse := func(status int, msg string) {
		d, err := u.variablesData(r, pid)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		d.Form, d.Error = f, msg
		d.Form.CanProtect = d.CanProtect
		if f.Masked {
			d.Form.Value = ""
		}
		u.renderVariables(w, r, status, d)
	}
	if !u.mayProtected(r, pid, f.Protected, true) {
		refuse(http.StatusForbidden, errProtectedVariable.Error())
		return
	}
	v, err := u.prj.CreateProjectVariable(r.Context(), pid, f.Key, f.change())
	if msg := variableRefusal(err); msg != "" {
		refuse(http.StatusBadRequest, msg)
		return
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/variables", pid), "variable_created")+"#variable-"+v.Key, http.StatusSeeOther)
}

// variableOf reads the path's variable, refusing a protected one to a role that may not
// act on it (ok false: answered).
func (u *UI) variableOf(w http.ResponseWriter, r *http.Request, pid int64, write bool) (builds.ProjectVariable, bool) {
	v, err := u.prj.ProjectVariable(r.Context(), pid, chi.URLParam(r, "key"))
	if err != nil {
		u.fail(w, r, err)
		return v, false
	}
	if !u.mayProtected(r, pid, v.Protected, write) {
		u.errorPage(w, r, http.StatusForbidden, errProtectedVariable.Error())
		return v, false
	}
	return v, true
}

func (u *UI) variableEditPage(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	v, ok := u.variableOf(w, r, pid, true)
	if !ok {
		return
	}
	f := variableForm{Key: v.Key, Masked: v.Masked, Protected: v.Protected, File: v.VariableType == builds.VariableFile, Existing: true,
		CanProtect: u.mayProtected(r, pid, true, true)}
	if !v.Masked {
		f.Value = v.Value
	}
	u.renderVariableEdit(w, r, http.StatusOK, variableEditData{ProjectID: pid, Form: f})
}

func (u *UI) renderVariableEdit(w http.ResponseWriter, r *http.Request, status int, d variableEditData) {
	u.render(w, r, status, "variable_edit", view{Title: "Edit variable " + d.Form.Key, Nav: "projects", Data: d})
}

func (u *UI) updateVariable(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	key := chi.URLParam(r, "key")
	f := variableFormValues(r)
	f.Key, f.Existing, f.CanProtect = key, true, u.mayProtected(r, pid, true, true)
	refuse := func(status int, msg string) {
		d := variableEditData{ProjectID: pid, Form: f, Error: msg}
		if f.Masked {
			d.Form.Value = ""
		}
		u.renderVariableEdit(w, r, status, d)
	}
	if !u.mayProtected(r, pid, f.Protected, true) {
		refuse(http.StatusForbidden, errProtectedVariable.Error())
		return
	}
	c := f.change()
	// As the API: whether the stored variable is protected is read under the update's lock.
	c.Guard = func(old builds.ProjectVariable) error {
		if !u.mayProtected(r, pid, old.Protected, true) {
			return errProtectedVariable
		}
		return nil
	}
	_, err = u.prj.UpdateProjectVariable(r.Context(), pid, key, c)
	if errors.Is(err, errProtectedVariable) {
		u.errorPage(w, r, http.StatusForbidden, errProtectedVariable.Error())
		return
	}
	if msg := variableRefusal(err); msg != "" {
		refuse(http.StatusBadRequest, msg)
		return
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/variables", pid), "variable_updated")+"#variable-"+key, http.StatusSeeOther)
}

func (u *UI) deleteVariable(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	// Read first, as the API: a developer may not delete a protected variable.
	v, ok := u.variableOf(w, r, pid, true)
	if !ok {
		return
	}
	if err := u.prj.DeleteProjectVariable(r.Context(), pid, v.Key); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/variables", pid), "variable_deleted"), http.StatusSeeOther)
}
