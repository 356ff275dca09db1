package webui

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/cipipeline"
	"github.com/jobapi/jobapi/gitremote"
)

// newPipelineVariableRows is how many variable rows the form has: the form works without
// the script, so its rows are fixed (the API takes any number).
const newPipelineVariableRows = 5

type newPipelineData struct {
	ProjectID int64
	// Project is nil for an implicit project, which has no repository to read from.
	Project   *projectRow
	Ref       string
	Variables []formVariable
	Error     string
	// Unavailable: this server was started without a pipeline creator.
	Unavailable bool
}

type formVariable struct {
	Key, Value string
	File       bool
}

// newPipelinePage is GitLab's "Run pipeline" form: a ref and variables; the configuration
// comes from the project's repository at that ref.
func (u *UI) newPipelinePage(w http.ResponseWriter, r *http.Request) {
	d, ok := u.newPipelineForm(w, r)
	if !ok {
		return
	}
	if d.Project != nil {
		d.Ref = d.Project.DefaultBranch
	}
	u.renderNewPipeline(w, r, http.StatusOK, d)
}

// newPipelineForm reads the project the form is for; ok false when it answered already.
func (u *UI) newPipelineForm(w http.ResponseWriter, r *http.Request) (newPipelineData, bool) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return newPipelineData{}, false
	}
	d := newPipelineData{ProjectID: pid, Unavailable: u.pipelines == nil, Variables: make([]formVariable, newPipelineVariableRows)}
	p, err := u.prj.Project(r.Context(), pid)
	switch {
	case err == nil:
		d.Project = &projectRow{Project: p, Repo: gitremote.Redact(p.RepoURL)}
	case !errors.Is(err, builds.ErrNotFound):
		u.fail(w, r, err)
		return d, false
	}
	return d, true
}

func (u *UI) renderNewPipeline(w http.ResponseWriter, r *http.Request, status int, d newPipelineData) {
	u.render(w, r, status, "new_pipeline", view{Title: fmt.Sprintf("Run a pipeline for project %d", d.ProjectID), Nav: "projects", Data: d})
}

// createPipeline runs the form: the same cipipeline.Creator.FromRef as the API's POST
// /projects/:id/pipeline with only a ref, with CI_PIPELINE_SOURCE web (GitLab's, for a
// pipeline run from its page). A refusal shows the form again with what was wrong.
func (u *UI) createPipeline(w http.ResponseWriter, r *http.Request) {
	d, ok := u.newPipelineForm(w, r)
	if !ok {
		return
	}
	d.Ref = strings.TrimSpace(r.PostFormValue("ref"))
	var vars []builds.Variable
	for i := range d.Variables {
		n := strconv.Itoa(i)
		v := formVariable{Key: strings.TrimSpace(r.PostFormValue("key_" + n)), Value: r.PostFormValue("value_" + n),
			File: r.PostFormValue("file_"+n) == "on"}
		d.Variables[i] = v
		switch {
		case v.Key == "" && v.Value == "":
			continue
		case v.Key == "":
			d.Error = fmt.Sprintf("Variable row %d has a value but no key.", i+1)
		}
		vars = append(vars, builds.Variable{Key: v.Key, Value: v.Value, File: v.File})
	}
	switch {
	case d.Unavailable:
		d.Error = "This server runs no pipelines from repositories: create one with the API (POST /api/v4/projects/:id/pipeline)."
	case d.Ref == "":
		d.Error = "Give the branch or tag to run the pipeline for."
	}
	if d.Error != "" {
		u.renderNewPipeline(w, r, http.StatusBadRequest, d)
		return
	}
	if !u.allowed(r, d.ProjectID, access.RunPipeline, d.Ref) {
		d.Error = d.Ref + " is protected: only members allowed to push or merge to it may run its pipelines."
		u.renderNewPipeline(w, r, http.StatusForbidden, d)
		return
	}
	req := cipipeline.FromRef{ProjectID: d.ProjectID, Ref: d.Ref, Source: builds.SourceWeb, Variables: vars}
	if u.pipelines.ServerURL == "" {
		// CI_SERVER_URL as the API gives it without JOBAPI_EXTERNAL_URL: the host asked.
		scheme := "http"
		if u.secure(r) {
			scheme = "https"
		}
		req.ServerURL = scheme + "://" + r.Host
	}
	p, err := u.pipelines.FromRef(r.Context(), req)
	var ce *ciconfig.Error
	var inv *builds.ValidationError
	switch {
	case errors.As(err, &ce):
		d.Error = ce.Error()
		status := http.StatusBadRequest
		if ce.Transient {
			status = http.StatusServiceUnavailable
		}
		u.renderNewPipeline(w, r, status, d)
		return
	case errors.As(err, &inv):
		d.Error = inv.Error()
		u.renderNewPipeline(w, r, http.StatusBadRequest, d)
		return
	case err != nil:
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipelines/%d", p.ProjectID, p.ID), "pipeline_created"), http.StatusSeeOther)
}
