package apitest_test

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
	resp, b := inst.Do(t, "POST", projectPath(proj.ID)+"/pipeline", map[string]any{"ref": "Feature/Login-Page", "ci_config": reviewAppYAML})
	wantStatus(t, resp, b, http.StatusCreated)
	p := decode[api.Pipeline](t, b)

	r := inst.NewRunner(t)
	deploy := r.TakeNamed(t, "deploy_review")
	wantVariables(t, deploy, map[string]string{
		"CI_ENVIRONMENT_NAME":   "review/feature-login-page",
		"CI_ENVIRONMENT_SLUG":   "review-feature-lo-kxm5zt",
		"CI_ENVIRONMENT_URL":    "https://review-feature-lo-kxm5zt.apps.example.com",
		"CI_ENVIRONMENT_ACTION": "start",
		"CI_ENVIRONMENT_TIER":   "development",
	})
	r.Finish(t, deploy, runnerclient.StateSuccess, "")
	r.NoJob(t) // the stop job is manual

	stop := jobByName(t, p, "stop_review")
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("%s/jobs/%d/play", projectPath(proj.ID), stop.ID), nil, nil)
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
	r.Finish(t, stopJob, runnerclient.StateSuccess, "")
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
		resp, b := inst.Do(t, "POST", projectPath(7)+"/pipeline?ref=main", c.yaml, "Content-Type", "application/yaml")
		if msg := wantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, c.want) {
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
