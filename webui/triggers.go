package webui

// A project's pipeline trigger tokens: the list (description, owner, last use, the token's
// last four characters), create (the token shown on that answer only, as GitLab shows it)
// and delete, through builds/triggers as the API's /projects/:id/triggers; maintainers'
// (access.ManageTriggers), declared on the routes.

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/triggers"
)

const triggersPerPage = 50

type triggersData struct {
	ProjectID        int64
	Rows             []triggers.Trigger
	Total            int
	Page             int
	PrevURL, NextURL string
	// Description is the create form's, kept when it was refused.
	Description string
	Error       string
	// NewToken is the token just created: shown on this answer only, never stored whole
	// nor put in a URL (history, logs).
	NewToken *triggers.Created
}

func (u *UI) triggersData(r *http.Request, pid int64) (triggersData, error) {
	d := triggersData{ProjectID: pid, Page: int(max(queryInt(r, "page", 1), 1))}
	list, total, err := u.triggers.List(r.Context(), pid, builds.Page{Page: d.Page, PerPage: triggersPerPage})
	if err != nil {
		return d, err
	}
	d.Rows, d.Total = list, total
	path := fmt.Sprintf("/projects/%d/triggers", pid)
	if d.Page > 1 {
		d.PrevURL = pageURL(path, r.URL.Query(), d.Page-1)
	}
	if d.Page*triggersPerPage < total {
		d.NextURL = pageURL(path, r.URL.Query(), d.Page+1)
	}
	return d, nil
}

func (u *UI) renderTriggers(w http.ResponseWriter, r *http.Request, status int, d triggersData, notice string) {
	u.render(w, r, status, "triggers", view{Title: fmt.Sprintf("Pipeline trigger tokens of project %d", d.ProjectID), Nav: "projects", Data: d, Notice: notice})
}

// triggersOf is the project's id when this server has trigger tokens (ok false: answered).
func (u *UI) triggersOf(w http.ResponseWriter, r *http.Request) (int64, bool) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return 0, false
	}
	if u.triggers == nil {
		u.errorPage(w, r, http.StatusNotFound, "This server has no pipeline trigger tokens.")
		return 0, false
	}
	return pid, true
}

func (u *UI) triggersPage(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.triggersOf(w, r)
	if !ok {
		return
	}
	d, err := u.triggersData(r, pid)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.renderTriggers(w, r, http.StatusOK, d, "")
}

// createTrigger answers with the list itself, the new token on it: a redirect would have to
// carry the token in a URL.
func (u *UI) createTrigger(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.triggersOf(w, r)
	if !ok {
		return
	}
	desc := strings.TrimSpace(r.PostFormValue("description"))
	if desc == "" {
		u.refuseTrigger(w, r, pid, desc, "Give the trigger a description: it is what the list tells tokens apart by.")
		return
	}
	created, err := u.triggers.Create(r.Context(), pid, desc)
	var inv *builds.ValidationError
	switch {
	case errors.As(err, &inv):
		u.refuseTrigger(w, r, pid, desc, inv.Error())
		return
	case err != nil:
		u.fail(w, r, err)
		return
	}
	d, err := u.triggersData(r, pid)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d.NewToken = &created
	u.renderTriggers(w, r, http.StatusCreated, d, fmt.Sprintf("Trigger token #%d created.", created.ID))
}

// refuseTrigger shows the list again with the create form's error and what was typed.
func (u *UI) refuseTrigger(w http.ResponseWriter, r *http.Request, pid int64, desc, msg string) {
	d, err := u.triggersData(r, pid)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d.Description, d.Error = desc, msg
	u.renderTriggers(w, r, http.StatusBadRequest, d, "")
}

func (u *UI) deleteTrigger(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.triggersOf(w, r)
	if !ok {
		return
	}
	id, err := pathInt(r, "trigger_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if err := u.triggers.Delete(r.Context(), pid, id); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/triggers", pid), "trigger_deleted"), http.StatusSeeOther)
}
