package webui

// A project's pipeline schedules: the list (description, cron, time zone, ref, active,
// next run, owner, last pipeline), create, edit (and activate or deactivate), play and
// delete, through builds/schedules as the API's /projects/:id/pipeline_schedules. Reading
// is a reporter's (access.ReadSchedules); changing, a developer's on refs the user may run
// pipelines on (access.ManageSchedules with the protected-ref rule): can checks a
// schedule's own ref from the path, and the handlers check a new ref before it is written.

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/gitref"
)

const schedulesPerPage = 20

type schedulesData struct {
	ProjectID        int64
	Rows             []scheduleRow
	Total            int
	Page             int
	PrevURL, NextURL string
	// CanCreate: the user's role may make schedules (on refs it may run pipelines on).
	CanCreate bool
	// Form is the create form, kept with its error when it was refused.
	Form  scheduleForm
	Error string
	// Partial: a last pipeline could not be read (the rest of the page could).
	Partial bool
}

type scheduleRow struct {
	schedules.Schedule
	// NextRunLocal is the next run in the schedule's own time zone.
	NextRunLocal string
	// Last is the pipeline it started last (nil: none, or deleted since).
	Last *builds.Pipeline
	// CanManage: the user may change, play and delete this one (its ref is one the user
	// may run pipelines on).
	CanManage bool
}

// scheduleForm is the create and edit form's fields.
type scheduleForm struct {
	ID                                   int64
	Description, Ref, Cron, CronTimezone string
	Active                               bool
}

// scheduleEditData is the edit page's.
type scheduleEditData struct {
	ProjectID int64
	Form      scheduleForm
	Error     string
}

// schedulesOf is the project's id when this server has schedules (ok false: answered).
func (u *UI) schedulesOf(w http.ResponseWriter, r *http.Request) (int64, bool) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return 0, false
	}
	if u.schedules == nil {
		u.errorPage(w, r, http.StatusNotFound, "This server has no pipeline schedules.")
		return 0, false
	}
	return pid, true
}

func (u *UI) schedulesData(r *http.Request, pid int64) (schedulesData, error) {
	d := schedulesData{ProjectID: pid, Page: int(max(queryInt(r, "page", 1), 1)), CanCreate: u.allowed(r, pid, access.ManageSchedules, ""),
		Form: scheduleForm{CronTimezone: "UTC", Active: true}}
	list, total, err := u.schedules.List(r.Context(), pid, schedules.ScopeAll, builds.Page{Page: d.Page, PerPage: schedulesPerPage})
	if err != nil {
		return d, err
	}
	d.Total = total
	// One protected-ref read per ref on the page, not per schedule.
	mayRun := map[string]bool{}
	for _, s := range list {
		row := scheduleRow{Schedule: s, NextRunLocal: s.NextRunAt.UTC().Format("2006-01-02 15:04 UTC")}
		if loc, err := schedules.ParseZone(s.CronTimezone); err == nil && loc != time.UTC {
			row.NextRunLocal = s.NextRunAt.In(loc).Format("2006-01-02 15:04 MST")
		}
		ok, seen := mayRun[s.Ref]
		if !seen {
			ok = d.CanCreate && u.allowed(r, pid, access.ManageSchedules, s.Ref)
			mayRun[s.Ref] = ok
		}
		row.CanManage = ok
		if s.LastPipelineID != 0 {
			p, err := u.svc.Pipeline(r.Context(), pid, s.LastPipelineID)
			switch {
			case err == nil:
				row.Last = &p
			case errors.Is(err, builds.ErrNotFound): // deleted since: no last pipeline
			case errors.Is(err, r.Context().Err()):
				return d, err
			default:
				u.log.WarnContext(r.Context(), "last pipeline not read for the schedules page", "schedule_id", s.ID, "error", err)
				d.Partial = true
			}
		}
		d.Rows = append(d.Rows, row)
	}
	path := fmt.Sprintf("/projects/%d/pipeline_schedules", pid)
	if d.Page > 1 {
		d.PrevURL = pageURL(path, r.URL.Query(), d.Page-1)
	}
	if d.Page*schedulesPerPage < total {
		d.NextURL = pageURL(path, r.URL.Query(), d.Page+1)
	}
	return d, nil
}

func (u *UI) renderSchedules(w http.ResponseWriter, r *http.Request, status int, d schedulesData) {
	u.render(w, r, status, "schedules", view{Title: fmt.Sprintf("Pipeline schedules of project %d", d.ProjectID), Nav: "projects", Data: d})
}

func (u *UI) schedulesPage(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.schedulesOf(w, r)
	if !ok {
		return
	}
	d, err := u.schedulesData(r, pid)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.renderSchedules(w, r, http.StatusOK, d)
}

// scheduleFormValues reads the form: a field the form did not send stays nil (the
// activate and deactivate buttons send active alone). active comes as a hidden "false"
// before the checkbox's "true": the last value sent wins.
func scheduleFormValues(r *http.Request) schedules.Change {
	var c schedules.Change
	_ = r.ParseForm() // requireCSRF has parsed it already; its error was answered there
	field := func(name string) *string {
		v, ok := r.PostForm[name]
		if !ok || len(v) == 0 {
			return nil
		}
		s := strings.TrimSpace(v[len(v)-1])
		return &s
	}
	c.Description, c.Ref, c.Cron, c.CronTimezone = field("description"), field("ref"), field("cron"), field("cron_timezone")
	if v := field("active"); v != nil {
		on := *v == "true"
		c.Active = &on
	}
	return c
}

func (f *scheduleForm) apply(c schedules.Change) {
	for _, p := range []struct {
		to   *string
		from *string
	}{{&f.Description, c.Description}, {&f.Ref, c.Ref}, {&f.Cron, c.Cron}, {&f.CronTimezone, c.CronTimezone}} {
		if p.from != nil {
			*p.to = *p.from
		}
	}
	if c.Active != nil {
		f.Active = *c.Active
	}
}

func formOf(s schedules.Schedule) scheduleForm {
	return scheduleForm{ID: s.ID, Description: s.Description, Ref: s.Ref, Cron: s.Cron, CronTimezone: s.CronTimezone, Active: s.Active}
}

// refRefused is the message for a ref the user may not schedule ("" when it may).
func (u *UI) refRefused(r *http.Request, pid int64, ref *string) string {
	if ref == nil || *ref == "" || u.allowed(r, pid, access.ManageSchedules, *ref) {
		return ""
	}
	name, _ := gitref.Split(*ref)
	return name + " is protected: only members allowed to push or merge to it may schedule its pipelines."
}

func (u *UI) createSchedule(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.schedulesOf(w, r)
	if !ok {
		return
	}
	c := scheduleFormValues(r)
	form := scheduleForm{CronTimezone: "UTC", Active: true}
	form.apply(c)
	refuse := func(status int, msg string) {
		d, err := u.schedulesData(r, pid)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		d.Form, d.Error = form, msg
		u.renderSchedules(w, r, status, d)
	}
	if msg := u.refRefused(r, pid, c.Ref); msg != "" {
		refuse(http.StatusForbidden, msg)
		return
	}
	s, err := u.schedules.Create(r.Context(), pid, c)
	var inv *builds.ValidationError
	switch {
	case errors.As(err, &inv):
		refuse(http.StatusBadRequest, inv.Error())
		return
	case err != nil:
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipeline_schedules", pid), "schedule_created")+fmt.Sprintf("#schedule-%d", s.ID), http.StatusSeeOther)
}

func (u *UI) scheduleEditPage(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.schedulesOf(w, r)
	if !ok {
		return
	}
	id, err := pathInt(r, "schedule_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	s, err := u.schedules.Get(r.Context(), pid, id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.renderScheduleEdit(w, r, http.StatusOK, scheduleEditData{ProjectID: pid, Form: formOf(s)})
}

func (u *UI) renderScheduleEdit(w http.ResponseWriter, r *http.Request, status int, d scheduleEditData) {
	u.render(w, r, status, "schedule_edit", view{Title: fmt.Sprintf("Edit pipeline schedule #%d", d.Form.ID), Nav: "projects", Data: d})
}

// updateSchedule takes the edit form, or an activate or deactivate button (active alone).
func (u *UI) updateSchedule(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.schedulesOf(w, r)
	if !ok {
		return
	}
	id, err := pathInt(r, "schedule_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	c := scheduleFormValues(r)
	refuse := func(status int, msg string) {
		s, err := u.schedules.Get(r.Context(), pid, id)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		form := formOf(s)
		form.apply(c)
		u.renderScheduleEdit(w, r, status, scheduleEditData{ProjectID: pid, Form: form, Error: msg})
	}
	if msg := u.refRefused(r, pid, c.Ref); msg != "" {
		refuse(http.StatusForbidden, msg)
		return
	}
	s, err := u.schedules.Update(r.Context(), pid, id, c)
	var inv *builds.ValidationError
	switch {
	case errors.As(err, &inv):
		refuse(http.StatusBadRequest, inv.Error())
		return
	case err != nil:
		u.fail(w, r, err)
		return
	}
	notice := "schedule_updated"
	if c.Description == nil && c.Active != nil {
		notice = "schedule_deactivated"
		if s.Active {
			notice = "schedule_activated"
		}
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipeline_schedules", pid), notice)+fmt.Sprintf("#schedule-%d", s.ID), http.StatusSeeOther)
}

// playSchedule creates the schedule's pipeline now (as the API's play: next_run_at stays)
// and opens it; a pipeline the repository refuses is an error page that says why.
func (u *UI) playSchedule(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.schedulesOf(w, r)
	if !ok {
		return
	}
	id, err := pathInt(r, "schedule_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	p, err := u.schedules.Play(r.Context(), pid, id)
	var ce *ciconfig.Error
	switch {
	case errors.As(err, &ce):
		status := http.StatusBadRequest
		if ce.Transient {
			status = http.StatusServiceUnavailable
		}
		u.errorPage(w, r, status, fmt.Sprintf("Schedule #%d's pipeline was not created: %s", id, ce.Error()))
		return
	case err != nil && p.ID == 0:
		u.fail(w, r, err)
		return
	case err != nil:
		// Created, not recorded as the schedule's last: the pipeline is there all the same.
		u.log.WarnContext(r.Context(), "played schedule's pipeline not recorded as its last", "schedule_id", id, "error", err)
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipelines/%d", pid, p.ID), "schedule_played"), http.StatusSeeOther)
}

func (u *UI) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	pid, ok := u.schedulesOf(w, r)
	if !ok {
		return
	}
	id, err := pathInt(r, "schedule_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if err := u.schedules.Delete(r.Context(), pid, id); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipeline_schedules", pid), "schedule_deleted"), http.StatusSeeOther)
}
