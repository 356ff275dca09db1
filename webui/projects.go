package webui

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/environment"
	"github.com/jobapi/jobapi/gitremote"
)

const projectsPerPage = 50

type projectsData struct {
	Rows             []projectRow
	Total            int
	Page             int
	PrevURL, NextURL string
}

type projectRow struct {
	builds.Project
	// Repo is the repo_url with its credentials taken out.
	Repo string
}

func (u *UI) projectsPage(w http.ResponseWriter, r *http.Request) {
	d := projectsData{Page: int(max(queryInt(r, "page", 1), 1))}
	pg := builds.Page{Page: d.Page, PerPage: projectsPerPage}
	var list []builds.Project
	var total int
	var err error
	switch a := actorOf(r); {
	case a.Admin:
		list, total, err = u.prj.Projects(r.Context(), pg)
	case u.perms != nil && a.Kind == builds.ActorUser:
		// A member sees its own projects, as the API's GET /projects answers it.
		list, total, err = u.perms.MemberProjects(r.Context(), a.UserID, pg)
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d.Total = total
	for _, p := range list {
		d.Rows = append(d.Rows, projectRow{Project: p, Repo: gitremote.Redact(p.RepoURL)})
	}
	if d.Page > 1 {
		d.PrevURL = pageURL("/projects", r.URL.Query(), d.Page-1)
	}
	if d.Page*projectsPerPage < total {
		d.NextURL = pageURL("/projects", r.URL.Query(), d.Page+1)
	}
	u.render(w, r, http.StatusOK, "projects", view{Title: "Projects", Nav: "projects", Data: d})
}

type projectData struct {
	ID int64
	// Project is nil for an implicit project: pipelines name its id, no row was created
	// (no repository; its jobs run with GIT_STRATEGY=none).
	Project *projectRow
	Table   pipelineTable
	// CanRun: the signed-in user's role may run pipelines here (the form checks the ref).
	CanRun bool
	// CanSchedules, CanVariables, CanTriggers: the user's role may open those pages.
	CanSchedules, CanVariables, CanTriggers bool
}

func (u *UI) projectPage(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d := projectData{ID: pid, CanRun: u.allowed(r, pid, access.RunPipeline, ""),
		CanSchedules: u.allowed(r, pid, access.ReadSchedules, ""), CanVariables: u.allowed(r, pid, access.ReadVariables, ""),
		CanTriggers: u.allowed(r, pid, access.ManageTriggers, "")}
	p, err := u.prj.Project(r.Context(), pid)
	switch {
	case err == nil:
		d.Project = &projectRow{Project: p, Repo: gitremote.Redact(p.RepoURL)}
	case !errors.Is(err, builds.ErrNotFound):
		u.fail(w, r, err)
		return
	}
	if d.Table, err = u.pipelineTable(r, views.PipelineFilter{ProjectID: pid}, fmt.Sprintf("/projects/%d", pid)); err != nil {
		u.fail(w, r, err)
		return
	}
	d.Table.OneProject = true
	if d.Project == nil && len(d.Table.Rows) == 0 && d.Table.Page == 1 {
		u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("There is no project %d, and no pipeline names it.", pid))
		return
	}
	title := "Project " + strconv.FormatInt(pid, 10)
	if d.Project != nil {
		title = d.Project.Name
	}
	v := view{Title: title, Nav: "projects", Live: "pipelines", Data: d}
	if wantsFragment(r) {
		u.fragment(w, r, "project", "rows", v)
		return
	}
	u.render(w, r, http.StatusOK, "project", v)
}

const environmentsPerPage = 20

type environmentsData struct {
	ProjectID        int64
	Rows             []environmentRow
	Total            int
	Page             int
	PrevURL, NextURL string
	// Partial: a last deployment could not be read (the rest of the page could).
	Partial bool
}

type environmentRow struct {
	projects.ProjectEnvironment
	// URL is the external_url when it is an http(s) URL (the API's rule: a row written
	// before that rule could hold anything, and a page must never link to javascript:).
	URL string
}

func (u *UI) environmentsPage(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d := environmentsData{ProjectID: pid, Page: int(max(queryInt(r, "page", 1), 1))}
	list, total, err := u.prj.Environments(r.Context(), pid, builds.Page{Page: d.Page, PerPage: environmentsPerPage})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d.Total = total
	for _, e := range list {
		// The list has no deployments; one read per environment, a page of them at most.
		full, err := u.prj.Environment(r.Context(), pid, e.ID)
		switch {
		case err == nil:
			e = full
		case errors.Is(err, r.Context().Err()):
			return
		default:
			u.log.WarnContext(r.Context(), "last deployment not read for the environments page", "environment_id", e.ID, "error", err)
			d.Partial = true
		}
		row := environmentRow{ProjectEnvironment: e}
		if environment.IsWebURL(e.ExternalURL) {
			row.URL = e.ExternalURL
		}
		d.Rows = append(d.Rows, row)
	}
	path := fmt.Sprintf("/projects/%d/environments", pid)
	if d.Page > 1 {
		d.PrevURL = pageURL(path, r.URL.Query(), d.Page-1)
	}
	if d.Page*environmentsPerPage < total {
		d.NextURL = pageURL(path, r.URL.Query(), d.Page+1)
	}
	u.render(w, r, http.StatusOK, "environments", view{Title: fmt.Sprintf("Environments of project %d", pid), Nav: "projects", Data: d})
}
