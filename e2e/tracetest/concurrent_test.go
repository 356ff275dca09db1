package tracetest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestConcurrentFinishesInOnePipeline: runners finishing the jobs of one stage at the same
// moment, each with a live log still in Redis, all get their final update taken (200), and
// the next stage is released. A finish that stores the log's last bytes and the build's end
// in an order that lets two finishes of one pipeline lock each other's rows deadlocks in
// Postgres (40P01, a 500 to the runner): 61629c9 did, and only the bench caught it.
func TestConcurrentFinishesInOnePipeline(t *testing.T) {
	t.Parallel()
	inst := start(t, jobapitest.Options{}, nil)
	const runners, perStage, rounds = 6, 6, 4
	rs := make([]*jobapitest.Runner, runners)
	for i := range rs {
		rs[i] = inst.NewRunner(t)
	}
	for round := range rounds {
		var defs []jobapitest.Job
		for j := range perStage {
			defs = append(defs, jobapitest.Job{"name": fmt.Sprintf("build-%d", j), "stage": "build", "script": []string{"true"}})
		}
		defs = append(defs, jobapitest.Job{"name": "deploy", "stage": "deploy", "script": []string{"true"}})
		p := inst.CreatePipeline(t, 1, []string{"build", "deploy"}, defs...)

		// Every runner takes one build job and streams a line into its live log first, so
		// that all final updates arrive together.
		jobs := make([]*runnerclient.Job, runners)
		for i, r := range rs {
			jobs[i] = r.Take(t)
			if res := r.Patch(t, jobs[i], 0, "compiling\n"); res.Code != http.StatusAccepted {
				t.Fatalf("round %d: PATCH: %d", round, res.Code)
			}
		}
		start := make(chan struct{})
		errs := make(chan error, runners)
		var wg sync.WaitGroup
		for i, r := range rs {
			wg.Go(func() {
				<-start
				res, err := r.UpdateJob(context.Background(), jobs[i], runnerclient.StateSuccess, runnerclient.UpdateOptions{})
				if err != nil || res.Code != http.StatusOK || res.JobStatus != "success" {
					errs <- fmt.Errorf("round %d: final update of %s: code %d Job-Status %q err %v", round, jobs[i].JobInfo.Name, res.Code, res.JobStatus, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
		deploy := rs[0].TakeNamed(t, "deploy")
		rs[0].Finish(t, deploy, runnerclient.StateSuccess, "")
		if got := inst.Pipeline(t, p); got.Status != "success" {
			t.Fatalf("round %d: pipeline %s, want success", round, got.Status)
		}
	}
}
