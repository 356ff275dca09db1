package pipelinetest_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// takeSet takes n jobs and requires exactly these names, in any order.
func takeSet(t *testing.T, r *jobapitest.Runner, names ...string) map[string]*runnerclient.Job {
	t.Helper()
	got := r.TakeAll(t, len(names))
	for _, n := range names {
		if got[n] == nil {
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			t.Fatalf("took %v, want %v", keys, names)
		}
	}
	return got
}

func playPath(projectID, id int64) string {
	return fmt.Sprintf("/api/v4/projects/%d/jobs/%d/play", projectID, id)
}

// TestDAGOrderAsRunnersSeeIt: jobs with needs start as soon as the jobs they need
// succeeded, whatever the stages between (package, of the last stage, runs while the test
// stage has not started); needs: [] starts at once; jobs without needs wait for every job
// of the earlier stages. The order the runner is handed jobs is the DAG's.
func TestDAGOrderAsRunnersSeeIt(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 40, "", []string{"build", "test", "deploy"},
		job{"name": "compile", "stage": "build", "script": "make"},
		job{"name": "lint", "stage": "build", "script": "lint"},
		job{"name": "unit", "stage": "test", "script": "go test"},
		job{"name": "slow", "stage": "test", "script": "sleep"},
		job{"name": "package", "stage": "deploy", "script": "tar", "needs": []string{"compile"}},
		job{"name": "docs", "stage": "deploy", "script": "mkdocs", "needs": []string{}},
		job{"name": "ship", "stage": "deploy", "script": "ship"})
	expect(t, inst, p, "pending", map[string]string{"compile": "pending", "lint": "pending", "docs": "pending",
		"unit": "created", "package": "created", "ship": "created"})

	var order []string
	first := takeSet(t, r, "compile", "lint", "docs")
	order = append(order, "compile, lint, docs")
	r.NoJob(t)
	r.Finish(t, first["compile"], runnerclient.StateSuccess, "")
	// lint still runs, the test stage has not started: package, which needs only compile, goes.
	pkg := r.TakeNamed(t, "package")
	order = append(order, "package")
	expect(t, inst, p, "running", map[string]string{"lint": "running", "unit": "created", "slow": "created", "package": "running"})
	r.NoJob(t)
	r.Finish(t, first["lint"], runnerclient.StateSuccess, "")
	tests := takeSet(t, r, "unit", "slow")
	order = append(order, "unit, slow")
	for _, j := range []*runnerclient.Job{pkg, first["docs"], tests["unit"]} {
		r.Finish(t, j, runnerclient.StateSuccess, "")
	}
	// ship waits for every job of the earlier stages: slow still runs.
	expect(t, inst, p, "running", map[string]string{"slow": "running", "ship": "created"})
	r.NoJob(t)
	r.Finish(t, tests["slow"], runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "ship"), runnerclient.StateSuccess, "")
	order = append(order, "ship")
	if want := []string{"compile, lint, docs", "package", "unit, slow", "ship"}; !slices.Equal(order, want) {
		t.Errorf("runner saw %v, want %v", order, want)
	}
	expect(t, inst, p, "success", nil)
	w := callWait(inst.URL, p.ProjectID, p.ID, 0)
	if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 {
		t.Fatalf("wait: %+v %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
}

// TestDAGFailureAndWhen: a failed need skips what needs it, transitively; on_failure and
// always jobs run after it, on_success jobs of later stages are skipped, and the pipeline
// fails; allow_failure: exit_codes lets a listed exit code through.
func TestDAGFailureAndWhen(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 41, "", []string{"build", "test", "deploy"},
		job{"name": "compile", "stage": "build", "script": "make"},
		job{"name": "flaky", "stage": "build", "script": "x", "allow_failure": map[string]any{"exit_codes": []int{1}}},
		job{"name": "unit", "stage": "test", "script": "go test", "needs": []string{"compile"}},
		job{"name": "e2e", "stage": "deploy", "script": "e2e", "needs": []string{"unit"}},
		job{"name": "after_flaky", "stage": "test", "script": "x", "needs": []string{"flaky"}},
		job{"name": "report", "stage": "deploy", "script": "report", "needs": []any{map[string]any{"job": "unit"}}, "when": "always"},
		job{"name": "rollback", "stage": "test", "script": "rollback", "when": "on_failure"},
		job{"name": "ship", "stage": "deploy", "script": "ship"})
	build := takeSet(t, r, "compile", "flaky")
	r.Finish(t, build["flaky"], runnerclient.StateFailed, runnerclient.ReasonScriptFailure) // exit code 1: allowed
	if d := inst.Job(t, p.ProjectID, build["flaky"].ID); !d.AllowFailure {
		t.Errorf("flaky failed with a listed exit code: allow_failure %t, want true", d.AllowFailure)
	}
	expect(t, inst, p, "running", map[string]string{"after_flaky": "pending", "rollback": "created"})
	r.Finish(t, r.TakeNamed(t, "after_flaky"), runnerclient.StateSuccess, "")
	r.Finish(t, build["compile"], runnerclient.StateFailed, runnerclient.ReasonScriptFailure)
	expect(t, inst, p, "running", map[string]string{"unit": "skipped", "e2e": "skipped", "report": "pending",
		"rollback": "pending", "ship": "created"})
	rest := takeSet(t, r, "report", "rollback")
	r.Finish(t, rest["report"], runnerclient.StateSuccess, "")
	r.Finish(t, rest["rollback"], runnerclient.StateSuccess, "")
	expect(t, inst, p, "failed", map[string]string{"ship": "skipped", "rollback": "success", "report": "success"})
	r.NoJob(t)
}

// TestManualJobsOverHTTP: an optional manual job holds nothing: the pipeline succeeds with
// it never played and the waiter reports no job left; played later, it runs. A blocking
// manual job holds the pipeline in status manual (the waiter keeps waiting) until it is
// played. Play answers the job; play of a job that is not manual is a 400.
func TestManualJobsOverHTTP(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 42, "", []string{"test", "deploy", "verify"},
		job{"name": "unit", "stage": "test", "script": "go test"},
		job{"name": "review", "stage": "deploy", "script": "deploy review", "when": "manual"},
		job{"name": "production", "stage": "deploy", "script": "deploy prod", "when": "manual", "allow_failure": false},
		job{"name": "smoke", "stage": "verify", "script": "curl"})
	r.Finish(t, r.TakeNamed(t, "unit"), runnerclient.StateSuccess, "")
	got := expect(t, inst, p, "manual", map[string]string{"review": "manual", "production": "manual", "smoke": "created"})
	r.NoJob(t)
	w := callWait(inst.URL, p.ProjectID, p.ID, 1)
	if w.err != nil || w.res.Status != "manual" || w.res.JobsRemaining != 2 || w.took < time.Second {
		t.Fatalf("wait on a pipeline blocked on a manual job: %+v after %v, %v; want manual, 2 left, the whole timeout", w.res, w.took, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)

	resp, body := inst.Do(t, "POST", playPath(p.ProjectID, jobapitest.JobID(t, got, "smoke")), nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Unplayable Job") {
		t.Fatalf("play of a created job: %d %s, want 400 Unplayable Job", resp.StatusCode, body)
	}
	var played api.JobDetail
	inst.MustDo(t, http.StatusOK, "POST", playPath(p.ProjectID, jobapitest.JobID(t, got, "production")), nil, &played)
	if played.Status != "pending" || played.When != "manual" || played.Name != "production" {
		t.Fatalf("play answered %+v", played)
	}
	jobapitest.WantEvents(t, inst.Events(t, p.ProjectID, played.ID), "created", "manual", "played")
	r.Finish(t, r.TakeNamed(t, "production"), runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "smoke"), runnerclient.StateSuccess, "")
	expect(t, inst, p, "success", map[string]string{"review": "manual", "production": "success", "smoke": "success"})
	w = callWait(inst.URL, p.ProjectID, p.ID, 5)
	if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 || w.took > time.Second {
		t.Fatalf("wait with only an optional manual job left: %+v after %v, %v; want success, 0 left, at once", w.res, w.took, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)

	// The optional job, played after the end, runs; the pipeline runs and ends again.
	inst.MustDo(t, http.StatusOK, "POST", playPath(p.ProjectID, jobapitest.JobID(t, got, "review")), nil, &played)
	expect(t, inst, p, "running", map[string]string{"review": "pending"})
	r.Finish(t, r.TakeNamed(t, "review"), runnerclient.StateSuccess, "")
	expect(t, inst, p, "success", map[string]string{"review": "success"})
	resp, body = inst.Do(t, "POST", playPath(p.ProjectID, jobapitest.JobID(t, got, "review")), nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "success") {
		t.Fatalf("second play: %d %s, want 400 naming the job's status", resp.StatusCode, body)
	}

	// An operator cancel ends a manual job.
	q := createPipeline(t, inst, 42, "", []string{"deploy"},
		job{"name": "gate", "stage": "deploy", "script": "x", "when": "manual", "allow_failure": false})
	var canceled api.JobDetail
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/cancel", q.ProjectID, q.Jobs[0].ID), nil, &canceled)
	if canceled.Status != "canceled" {
		t.Fatalf("cancel of a manual job: %s", canceled.Status)
	}
	expect(t, inst, q, "canceled", nil)
}

// TestDelayedJobAfterRestart: a delayed job's time of record is in Postgres. Scheduled by
// one replica that then stops before the time comes, it is queued by the background pass of
// a replica started afterwards, once start_in has passed and not before.
func TestDelayedJobAfterRestart(t *testing.T) {
	t.Parallel()
	first := jobapitest.Start(t, jobapitest.Options{})
	p := createPipeline(t, first, 43, "", []string{"build", "deploy"},
		job{"name": "rollout", "stage": "deploy", "script": "x", "when": "delayed", "start_in": "2 seconds", "needs": []string{}},
		job{"name": "verify", "stage": "deploy", "script": "x", "needs": []string{"rollout"}})
	got := expect(t, first, p, "scheduled", map[string]string{"rollout": "scheduled", "verify": "created"})
	d := first.Job(t, p.ProjectID, jobapitest.JobID(t, got, "rollout"))
	if d.ScheduledAt == nil || d.ScheduledAt.Sub(d.CreatedAt).Round(time.Millisecond) != 2*time.Second {
		t.Fatalf("rollout scheduled at %v, created at %v; want 2 s later", d.ScheduledAt, d.CreatedAt)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(*d.ScheduledAt) + 100*time.Millisecond)
	// Nobody ran the pass meanwhile: the job waits in Postgres, past its time.
	expect(t, first.Replica(t, jobapitest.Options{}), p, "scheduled", map[string]string{"rollout": "scheduled"})

	second := first.Replica(t, jobapitest.Options{Sweeper: true}) // runs the background passes
	r := second.NewRunner(t)
	j := r.TakeWithin(t, 10*time.Second)
	if j.JobInfo.Name != "rollout" {
		t.Fatalf("took %q, want rollout", j.JobInfo.Name)
	}
	jobapitest.WantEvents(t, second.Events(t, p.ProjectID, j.ID), "scheduled", "queued", "assigned")
	r.Finish(t, j, runnerclient.StateSuccess, "")
	r.Finish(t, r.TakeNamed(t, "verify"), runnerclient.StateSuccess, "")
	expect(t, second, p, "success", nil)
}

// TestDelayedJobWaitsForItsTime: on the replica's clock, the pass leaves a delayed job
// scheduled before its time and queues it after; a scheduled pipeline is never stuck, however
// long start_in is against the stuck timeout.
func TestDelayedJobWaitsForItsTime(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) {
		c.StuckStageTimeout = time.Hour
	}})
	t0 := clock.Now()
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 44, "", []string{"build", "deploy"},
		job{"name": "compile", "stage": "build", "script": "x"},
		job{"name": "nightly", "stage": "deploy", "script": "x", "when": "delayed", "start_in": "1 day"})
	clock.Set(t0.Add(time.Minute))
	r.Finish(t, r.TakeNamed(t, "compile"), runnerclient.StateSuccess, "")
	expect(t, inst, p, "scheduled", map[string]string{"nightly": "scheduled"})
	for _, after := range []time.Duration{2 * time.Hour, 24 * time.Hour} {
		clock.Set(t0.Add(after))
		if n, err := inst.Due.EnqueueOnce(t.Context()); err != nil || n != 0 {
			t.Fatalf("due pass at +%v: %d, %v; want nothing yet", after, n, err)
		}
		if res := checkStuck(t, inst); len(res.Stuck) != 0 {
			t.Fatalf("stuck check at +%v found %+v: a scheduled pipeline is not stuck", after, res.Stuck)
		}
		r.NoJob(t)
	}
	clock.Set(t0.Add(24*time.Hour + time.Minute))
	if n, err := inst.Due.EnqueueOnce(t.Context()); err != nil || n != 1 {
		t.Fatalf("due pass after start_in: %d, %v; want 1", n, err)
	}
	r.Finish(t, r.TakeNamed(t, "nightly"), runnerclient.StateSuccess, "")
	expect(t, inst, p, "success", nil)
}

// TestStuckCheckWithDAG: in a DAG pipeline builds of several stages run at once; the stuck
// check waits for all of them and, pessimistic, fails them all, skipping what needs them. A
// pipeline blocked on a manual job beside it is no candidate.
func TestStuckCheckWithDAG(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	logs := &logBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Log: logs, Configure: func(c *server.Config) {
		c.StuckStageTimeout = 2 * time.Hour
	}})
	t0 := clock.Now()
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 45, "pessimistic", []string{"build", "test", "deploy"},
		job{"name": "compile", "stage": "build", "script": "x"},
		job{"name": "fetch", "stage": "build", "script": "x"},
		job{"name": "unit", "stage": "test", "script": "x", "needs": []string{"compile"}},
		job{"name": "ship", "stage": "deploy", "script": "x", "needs": []string{"unit", "fetch"}})
	blocked := createPipeline(t, inst, 45, "", []string{"deploy"},
		job{"name": "gate", "stage": "deploy", "script": "x", "when": "manual", "allow_failure": false})
	build := takeSet(t, r, "compile", "fetch")
	r.Finish(t, build["compile"], runnerclient.StateSuccess, "")
	unit := r.TakeNamed(t, "unit") // test stage runs while fetch of the build stage still runs

	clock.Set(t0.Add(time.Hour))
	if res := checkStuck(t, inst); len(res.Stuck) != 0 {
		t.Fatalf("stuck within the timeout: %+v", res.Stuck)
	}
	clock.Set(t0.Add(3 * time.Hour))
	res := checkStuck(t, inst)
	if len(res.Stuck) != 1 || res.Stuck[0].PipelineID != p.ID {
		t.Fatalf("stuck check found %+v, want pipeline %d only (not the one blocked on a manual job)", res.Stuck, p.ID)
	}
	wantStuckLog(t, logs, p.ID, "build, test", "pessimistic",
		fmt.Sprintf("%d fetch (running), %d unit (running)", build["fetch"].ID, unit.ID))
	for _, id := range []int64{build["fetch"].ID, unit.ID} {
		wantStuckEvent(t, inst, p.ProjectID, id, p.ID, "build, test", "pessimistic")
	}
	expect(t, inst, p, "failed", map[string]string{"fetch": "failed", "unit": "failed", "ship": "skipped"})
	expect(t, inst, blocked, "manual", map[string]string{"gate": "manual"})
	wantAborted(t, r, unit, "failed")
}

// TestDependentReleasedOnceAcrossReplicas: the two jobs a third one needs finish at the same
// moment through two replicas; the dependent is queued exactly once.
func TestDependentReleasedOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := jobapitest.Start(t, jobapitest.Options{})
	b := a.Replica(t, jobapitest.Options{})
	id, token := a.CreateRunner(t)
	_ = id
	ra := jobapitest.NewRunner(t, a.URL, token, "s_a")
	rb := jobapitest.NewRunner(t, b.URL, token, "s_b")
	for round := range 8 {
		p := createPipeline(t, a, 46, "", []string{"build", "deploy"},
			job{"name": "left", "stage": "build", "script": "x"},
			job{"name": "right", "stage": "build", "script": "x"},
			job{"name": "join", "stage": "deploy", "script": "x", "needs": []string{"left", "right"}})
		left, right := ra.TakeNamed(t, "left"), rb.TakeNamed(t, "right")
		var wg sync.WaitGroup
		for _, fin := range []struct {
			r *jobapitest.Runner
			j *runnerclient.Job
		}{{ra, left}, {rb, right}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := fin.r.UpdateJob(context.Background(), fin.j, runnerclient.StateSuccess, runnerclient.UpdateOptions{})
				if err != nil || res.Code != http.StatusOK {
					t.Errorf("round %d: final update of %s: %d %v", round, fin.j.JobInfo.Name, res.Code, err)
				}
			}()
		}
		wg.Wait()
		got := expect(t, a, p, "running", map[string]string{"left": "success", "right": "success", "join": "pending"})
		if ev := eventsOf(t, a, p.ProjectID, jobapitest.JobID(t, got, "join"), builds.EventQueued); len(ev) != 1 {
			t.Fatalf("round %d: join queued %d times, want once", round, len(ev))
		}
		ra.Finish(t, ra.TakeNamed(t, "join"), runnerclient.StateSuccess, "")
	}
}
