// Operator API, environments and deployments: a member's personal access token, or an
// administrator's (or the admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's
// action (h.can in routes.go) decides by the caller's role (builds/access).

package handlers

import (
	"net/http"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/environment"
)

// The environments and deployments API (GitLab's shapes): environments and deployments
// come from .gitlab-ci.yml's environment, recorded by the store with the jobs.

func (h *Handler) listEnvironments(w http.ResponseWriter, r *http.Request) error {
	return writeProjectPage(w, r, h.prj.Environments, environmentView)
}

func (h *Handler) getEnvironment(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "environment_id")
	if err != nil {
		return err
	}
	e, err := h.prj.Environment(r.Context(), pid, id)
	if err != nil {
		return err
	}
	out := environmentView(e)
	// GitLab's single environment always has the key, null without a deployment.
	type withLast struct {
		api.Environment
		LastDeployment *api.Deployment `json:"last_deployment"`
	}
	body := withLast{Environment: out}
	if e.LastDeployment != nil {
		d := deploymentView(*e.LastDeployment)
		body.LastDeployment = &d
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (h *Handler) listDeployments(w http.ResponseWriter, r *http.Request) error {
	return writeProjectPage(w, r, h.prj.Deployments, deploymentView)
}

func environmentView(e projects.ProjectEnvironment) api.Environment {
	out := api.Environment{ID: e.ID, Name: e.Name, Slug: e.Slug, State: e.State, Tier: e.Tier,
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
	// Only an http(s) URL is shown: a row written before that rule could hold anything.
	if environment.IsWebURL(e.ExternalURL) {
		url := e.ExternalURL
		out.ExternalURL = &url
	}
	return out
}

func deploymentView(d projects.Deployment) api.Deployment {
	b := d.Build
	return api.Deployment{ID: d.ID, Ref: d.Ref, Sha: d.SHA, Status: d.Status, CreatedAt: d.CreatedAt,
		UpdatedAt: d.UpdatedAt, FinishedAt: d.FinishedAt,
		Environment: api.DeploymentEnvironment{ID: d.EnvironmentID, Name: d.EnvironmentName},
		Deployable: api.Deployable{ID: b.ID, Name: b.Name, Stage: b.Stage, Status: string(b.Status), Ref: b.Ref,
			CreatedAt: b.CreatedAt, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt,
			Pipeline: api.DeployablePipeline{ID: b.PipelineID, Ref: b.Ref, Sha: b.SHA}}}
}
