package pgstore

import (
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// An automatic retry of a deploy job is a deployment of its own (the retry's statement
// records it), the failed attempt's deployment stays failed, and the environment has the
// retry's deployment as its last once it succeeds.
func TestAutoRetryDeploysAgain(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	env := &builds.Environment{Name: "staging", Slug: "staging", URL: "https://staging.example.com", Action: "start", Tier: "staging"}
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 5, Stages: []string{"deploy"}, Jobs: []builds.JobDefinition{
		{Name: "deploy", Stage: "deploy", Script: []string{"./deploy"}, Environment: env, Retry: builds.RetryRule{Max: 1}},
	}})
	first := c.take(t)
	policy := builds.DefaultRetryPolicy(0) // the job's own retry: max 1 decides
	res, err := store.Finish(t.Context(), builds.Finish{BuildID: first.ID, From: []builds.Status{builds.StatusRunning},
		To: builds.StatusFailed, Reason: "script_failure", Event: builds.EventFinished, Now: time.Now(), Policy: &policy})
	if err != nil || res.Retry == nil {
		t.Fatalf("finish: %+v, %v; want an automatic retry", res, err)
	}
	retry := c.take(t)
	c.succeed(t, retry.ID)

	deps, total, err := store.Deployments(t.Context(), 5, builds.Page{Page: 1, PerPage: 10})
	if err != nil || total != 2 || len(deps) != 2 {
		t.Fatalf("deployments: %d of %d, %v; want 2", len(deps), total, err)
	}
	if deps[0].Build.ID != first.ID || deps[0].Status != "failed" || deps[1].Build.ID != retry.ID || deps[1].Status != "success" ||
		deps[1].EnvironmentID != deps[0].EnvironmentID || deps[1].FinishedAt == nil {
		t.Errorf("deployments %+v, want the failed attempt then the retry's success, one environment", deps)
	}
	e, err := store.Environment(t.Context(), 5, deps[0].EnvironmentID)
	if err != nil || e.State != "available" || e.ExternalURL != env.URL || e.LastDeployment == nil || e.LastDeployment.Build.ID != retry.ID {
		t.Errorf("environment %+v, %v; want available with the retry's deployment", e, err)
	}
}
