package handlers

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/builds/pushes"
	"github.com/jobapi/jobapi/builds/users"
)

// Body limits per route family. A trace PATCH carries at most 1 MiB from gitlab-runner.
const (
	limitSmall    = 64 << 10
	limitTrace    = 1<<20 + 64<<10
	limitPipeline = 8 << 20
)

// Time a request body may take to arrive, per route family: seconds for the runner's small
// JSON bodies, more for a 1 MiB trace patch on a slow link and for operator bodies. Only
// uploads (artifacts, when they come) should need minutes.
const (
	runnerBodyTimeout   = 10 * time.Second
	traceBodyTimeout    = 30 * time.Second
	operatorBodyTimeout = 30 * time.Second
	pipelineBodyTimeout = 60 * time.Second
)

// routes lists every route; it mirrors openapi.yaml.
func (h *Handler) routes(reg *prometheus.Registry) http.Handler {
	r := chi.NewRouter()
	// The operator bound is the default: it also covers unmatched paths, whose bodies the
	// server drains after the 404.
	r.Use(h.requestID, h.recoverer, h.observe, bodyDeadline(operatorBodyTimeout), refSlashes, h.projectPaths)

	r.Get("/-/liveness", h.liveness)
	r.Get("/-/readiness", h.readiness)
	// OpenID Connect discovery for relying parties verifying id_tokens, at GitLab's paths.
	r.Get("/.well-known/openid-configuration", h.wrap(h.openIDConfiguration))
	r.Get("/oauth/discovery/keys", h.wrap(h.discoveryKeys))
	if reg != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}

	r.Route("/api/v4", func(r chi.Router) {
		// Runner protocol (runner_*.go): runner, registration and job tokens.
		runnerJSON := r.With(limitBody(limitSmall), bodyDeadline(runnerBodyTimeout))
		runnerJSON.Post("/runners/verify", h.wrap(h.verifyRunner))
		runnerJSON.Post("/runners", h.wrap(h.registerRunner))
		runnerJSON.Delete("/runners", h.wrap(h.unregisterRunner))
		runnerJSON.Delete("/runners/managers", h.wrap(h.unregisterManager))
		runnerJSON.Post("/runners/reset_authentication_token", h.wrap(h.resetRunnerToken))
		runnerJSON.Post("/jobs/request", h.wrap(h.requestJob))
		runnerJSON.Put("/jobs/{job_id}", h.wrap(h.updateJob))
		r.With(limitBody(limitTrace), bodyDeadline(traceBodyTimeout)).Patch("/jobs/{job_id}/trace", h.wrap(h.patchTrace))
		// The upload's size limit is the artifact limit, enforced while it streams.
		r.With(bodyDeadline(h.uploadTimeout)).Post("/jobs/{job_id}/artifacts", h.wrap(h.uploadArtifact))
		r.Get("/jobs/{job_id}/artifacts", h.wrap(h.downloadArtifact))

		// Operator API (op_*.go): a personal access token or the admin token, in PRIVATE-TOKEN
		// or Authorization: Bearer (authenticate.go). Instance-wide routes declare their
		// action like a project's (h.can, access.go): administrators'; the runners' rows also
		// take the runner scopes.
		r.Group(func(r chi.Router) {
			r.Use(h.routeAccess, limitBody(limitSmall))
			read, manage := r.With(h.can(access.ReadInstance)), r.With(h.can(access.ManageInstance))
			readRunners, manageRunners := r.With(h.can(access.ReadRunners)), r.With(h.can(access.ManageRunners))
			r.With(h.can(access.CreateRunner)).Post("/user/runners", h.wrap(h.createRunner))
			readRunners.Get("/runners", h.wrap(h.listRunners))
			readRunners.Get("/runners/{runner_id}", h.wrap(h.getRunner))
			manageRunners.Put("/runners/{runner_id}", h.wrap(h.updateRunner))
			manageRunners.Delete("/runners/{runner_id}", h.wrap(h.deleteRunner))
			manageRunners.Post("/runners/{runner_id}/reset_authentication_token", h.wrap(h.resetRunnerTokenByID))
			readRunners.Get("/runners/all", h.wrap(h.listAllRunners))
			read.Get("/admin/jobs", h.wrap(h.listJobs))
			read.Get("/admin/events", h.wrap(h.listAuditEvents))
			read.Get("/features", h.wrap(h.listFeatures))
			manage.Post("/features/{name}", h.wrap(h.setFeature))
			manage.Delete("/features/{name}", h.wrap(h.deleteFeature))
			manage.Post("/users", h.wrap(h.needUsers(h.createUser)))
			read.Get("/users", h.wrap(h.needUsers(h.listUsers)))
			read.Get("/users/{user_id}", h.wrap(h.needUsers(h.getUserByID)))
			manage.Put("/users/{user_id}", h.wrap(h.needUsers(h.updateUser)))
			manage.Delete("/users/{user_id}", h.wrap(h.needUsers(h.deleteUser)))
			manage.Post("/users/{user_id}/block", h.wrap(h.needUsers(h.setUserState(users.StateBlocked))))
			manage.Post("/users/{user_id}/unblock", h.wrap(h.needUsers(h.setUserState(users.StateActive))))
			manage.Post("/users/{user_id}/personal_access_tokens", h.wrap(h.needUsers(h.createUserToken)))
		})
		// The caller's own: anyone authenticated.
		r.Group(func(r chi.Router) {
			r.Use(h.authenticate, limitBody(limitSmall))
			r.Get("/user", h.wrap(h.getUser))
			r.Get("/version", h.wrap(h.getVersion))
			r.Post("/user/personal_access_tokens", h.wrap(h.needUsers(h.createOwnToken)))
			r.Get("/personal_access_tokens", h.wrap(h.needUsers(h.listTokens)))
			r.Get("/personal_access_tokens/self", h.wrap(h.needUsers(h.getToken(true))))
			r.Delete("/personal_access_tokens/self", h.wrap(h.needUsers(h.revokeToken(true))))
			r.Post("/personal_access_tokens/self/rotate", h.wrap(h.needUsers(h.rotateToken(true))))
			r.Get("/personal_access_tokens/{token_id}", h.wrap(h.needUsers(h.getToken(false))))
			r.Delete("/personal_access_tokens/{token_id}", h.wrap(h.needUsers(h.revokeToken(false))))
			r.Post("/personal_access_tokens/{token_id}/rotate", h.wrap(h.needUsers(h.rotateToken(false))))
		})
		// A project's routes: each declares its action (h.can), which builds/access decides
		// for the caller on the project of the path (access.go).
		r.Group(func(r chi.Router) {
			r.Use(h.projectAccess, limitBody(limitSmall))
			r.With(h.can(access.ManageInstance)).Post("/projects", h.wrap(h.createProject))
			r.With(h.can(access.ListProjects)).Get("/projects", h.wrap(h.listProjects))
			r.With(h.can(access.ReadProject)).Get("/projects/{project_id}", h.wrap(h.getProject))
			r.With(h.can(access.UpdateProject)).Put("/projects/{project_id}", h.wrap(h.updateProject))
			r.With(h.can(access.DeleteProject)).Delete("/projects/{project_id}", h.wrap(h.deleteProject))
			r.With(h.can(access.ReadVariables)).Get("/projects/{project_id}/variables", h.wrap(h.listVariables))
			r.With(h.can(access.WriteVariables)).Post("/projects/{project_id}/variables", h.wrap(h.createVariable))
			r.With(h.can(access.ReadVariables)).Get("/projects/{project_id}/variables/{key}", h.wrap(h.getVariable))
			r.With(h.can(access.WriteVariables)).Put("/projects/{project_id}/variables/{key}", h.wrap(h.updateVariable))
			r.With(h.can(access.WriteVariables)).Delete("/projects/{project_id}/variables/{key}", h.wrap(h.deleteVariable))
			r.With(h.can(access.ReadProtectedRefs)).Get("/projects/{project_id}/protected_branches", h.wrap(h.listProtectedRefs(projects.RefBranch)))
			r.With(h.can(access.ManageProtectedRefs)).Post("/projects/{project_id}/protected_branches", h.wrap(h.createProtectedRef(projects.RefBranch)))
			r.With(h.can(access.ReadProtectedRefs)).Get("/projects/{project_id}/protected_branches/{name}", h.wrap(h.getProtectedRef(projects.RefBranch)))
			r.With(h.can(access.ManageProtectedRefs)).Delete("/projects/{project_id}/protected_branches/{name}", h.wrap(h.deleteProtectedRef(projects.RefBranch)))
			r.With(h.can(access.ReadProtectedRefs)).Get("/projects/{project_id}/protected_tags", h.wrap(h.listProtectedRefs(projects.RefTag)))
			r.With(h.can(access.ManageProtectedRefs)).Post("/projects/{project_id}/protected_tags", h.wrap(h.createProtectedRef(projects.RefTag)))
			r.With(h.can(access.ReadProtectedRefs)).Get("/projects/{project_id}/protected_tags/{name}", h.wrap(h.getProtectedRef(projects.RefTag)))
			r.With(h.can(access.ManageProtectedRefs)).Delete("/projects/{project_id}/protected_tags/{name}", h.wrap(h.deleteProtectedRef(projects.RefTag)))
			r.With(h.can(access.ReadProject)).Get("/projects/{project_id}/members", h.wrap(h.listMembers))
			r.With(h.can(access.ReadProject)).Get("/projects/{project_id}/members/all", h.wrap(h.listMembers))
			r.With(h.can(access.ManageMembers)).Post("/projects/{project_id}/members", h.wrap(h.addMember))
			r.With(h.can(access.ReadProject)).Get("/projects/{project_id}/members/{user_id}", h.wrap(h.getMember))
			r.With(h.can(access.ManageMembers)).Put("/projects/{project_id}/members/{user_id}", h.wrap(h.updateMember))
			r.With(h.canBy(removalAction)).Delete("/projects/{project_id}/members/{user_id}", h.wrap(h.removeMember))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines", h.wrap(h.listPipelines))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/latest", h.wrap(h.latestPipeline))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}", h.wrap(h.getPipeline))
			r.With(h.can(access.DeletePipeline)).Delete("/projects/{project_id}/pipelines/{pipeline_id}", h.wrap(h.deletePipeline))
			r.With(h.can(access.ReadPipelineVariables)).Get("/projects/{project_id}/pipelines/{pipeline_id}/variables", h.wrap(h.getPipelineVariables))
			r.With(h.can(access.RetryJob)).Post("/projects/{project_id}/pipelines/{pipeline_id}/retry", h.wrap(h.retryPipeline))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}/jobs", h.wrap(h.getPipelineJobs))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}/bridges", h.wrap(h.getPipelineBridges))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}/test_report", h.wrap(h.getTestReport))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}/test_report_summary", h.wrap(h.getTestReportSummary))
			r.With(h.can(access.CancelJob)).Post("/projects/{project_id}/pipelines/{pipeline_id}/cancel", h.wrap(h.cancelPipeline))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}/wait", h.wrap(h.waitPipeline))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/jobs/{job_id}", h.wrap(h.getJob))
			r.With(h.can(access.ReadJobLogs)).Get("/projects/{project_id}/jobs/{job_id}/trace", h.wrap(h.getTrace))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/jobs/{job_id}/events", h.wrap(h.getEvents))
			r.With(h.can(access.CancelJob)).Post("/projects/{project_id}/jobs/{job_id}/cancel", h.wrap(h.cancelJob))
			r.With(h.can(access.RetryJob)).Post("/projects/{project_id}/jobs/{job_id}/retry", h.wrap(h.retryJob))
			r.With(h.can(access.PlayJob)).Post("/projects/{project_id}/jobs/{job_id}/play", h.wrap(h.playJob))
			r.With(h.can(access.ReadArtifacts)).Get("/projects/{project_id}/jobs/{job_id}/artifacts", h.wrap(h.getJobArtifacts))
			r.With(h.can(access.ReadArtifacts)).Get("/projects/{project_id}/jobs/{job_id}/artifacts/*", h.wrap(h.getJobArtifactFile))
			r.With(h.can(access.DeleteArtifacts)).Delete("/projects/{project_id}/jobs/{job_id}/artifacts", h.wrap(h.deleteJobArtifacts))
			r.With(h.can(access.ReadEnvironments)).Get("/projects/{project_id}/environments", h.wrap(h.listEnvironments))
			r.With(h.can(access.ReadEnvironments)).Get("/projects/{project_id}/environments/{environment_id}", h.wrap(h.getEnvironment))
			r.With(h.can(access.ReadEnvironments)).Get("/projects/{project_id}/deployments", h.wrap(h.listDeployments))
			r.With(h.can(access.ReadEnvironments)).Get("/projects/{project_id}/resource_groups", h.wrap(h.listResourceGroups))
			r.With(h.can(access.ReadEnvironments)).Get("/projects/{project_id}/resource_groups/{key}", h.wrap(h.getResourceGroup))
			r.With(h.can(access.ManageEnvironments)).Put("/projects/{project_id}/resource_groups/{key}", h.wrap(h.updateResourceGroup))
			r.With(h.can(access.ReadEnvironments)).Get("/projects/{project_id}/resource_groups/{key}/upcoming_jobs", h.wrap(h.upcomingJobs))
			r.With(h.can(access.UpdateProject)).Get("/projects/{project_id}/push_settings", h.wrap(h.needPushes(h.getPushSettings)))
			r.With(h.can(access.UpdateProject)).Put("/projects/{project_id}/push_settings", h.wrap(h.needPushes(h.updatePushSettings)))
			r.With(h.can(access.UpdateProject)).Post("/projects/{project_id}/push_settings/poll", h.wrap(h.needPushes(h.pollProject)))
			// GitLab's lists and reads that team scripts call (python-gitlab and the like).
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/jobs", h.wrap(h.listProjectJobs))
			r.With(h.can(access.ReadJobLogs)).Head("/projects/{project_id}/jobs/{job_id}/trace", h.wrap(h.getTrace))
			r.With(h.can(access.ReadArtifacts)).Get("/projects/{project_id}/jobs/artifacts/{ref_name}/download", h.wrap(h.getRefArtifacts))
			r.With(h.can(access.ReadArtifacts)).Get("/projects/{project_id}/jobs/artifacts/{ref_name}/raw/*", h.wrap(h.getRefArtifactFile))
			r.With(h.can(access.ReadPipelines)).Get("/projects/{project_id}/repository/commits/{sha}/statuses", h.wrap(h.listCommitStatuses))
			r.With(h.can(access.ReadProjectRunners)).Get("/projects/{project_id}/runners", h.wrap(h.listProjectRunners))
			h.triggerRoutes(r)
			h.scheduleRoutes(r)
			h.hookRoutes(r)
			h.forgeStatusRoutes(r)
		})
		// Forges' webhooks: signed with the project's secret instead of a token.
		r.With(limitBody(pushes.MaxPayload), bodyDeadline(pipelineBodyTimeout)).Post("/projects/{project_id}/hooks/inbound/{forge}",
			h.wrap(h.needPushes(h.receiveWebhook)))
		h.triggerPipelineRoutes(r)
		r.With(h.projectAccess, h.can(access.RunPipeline), limitBody(limitPipeline), bodyDeadline(pipelineBodyTimeout)).Post("/projects/{project_id}/pipeline", h.wrap(h.createPipeline))
		r.With(h.projectAccess, h.can(access.RunPipeline), limitBody(limitPipeline), bodyDeadline(pipelineBodyTimeout)).Post("/projects/{project_id}/ci/lint", h.wrap(h.lint))
	})
	notFound := h.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return &httpError{code: http.StatusNotFound, msg: "404 Not Found"}
	})
	if h.ui != nil {
		// The web UI has every other path; the API's own unknown paths stay JSON 404s.
		r.Handle("/*", h.ui)
		r.Handle("/", h.ui)
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(h.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return &httpError{code: http.StatusMethodNotAllowed, msg: "405 Method Not Allowed"}
	}))
	return r
}
