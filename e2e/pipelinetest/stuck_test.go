package pipelinetest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// stuckLog finds the error line the stuck-stage check wrote for a pipeline.
func stuckLog(t *testing.T, logs *logBuffer, pipelineID int64) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, rec := range logs.records(t) {
		if id, _ := rec["pipeline_id"].(float64); int64(id) == pipelineID && strings.Contains(fmt.Sprint(rec["msg"]), "stuck") {
			found = append(found, rec)
		}
	}
	if len(found) != 1 {
		t.Fatalf("pipeline %d: %d stuck log lines, want 1: %v", pipelineID, len(found), found)
	}
	return found[0]
}

func wantStuckLog(t *testing.T, logs *logBuffer, pipelineID int64, stage, strategy, waitingFor string) {
	t.Helper()
	rec := stuckLog(t, logs, pipelineID)
	if rec["level"] != "ERROR" || rec["stage"] != stage || rec["strategy"] != strategy || rec["waiting_for"] != waitingFor {
		t.Errorf("stuck log line %v; want level ERROR, stage %q, strategy %q, waiting_for %q", rec, stage, strategy, waitingFor)
	}
}

func wantStuckEvent(t *testing.T, inst *jobapitest.Instance, projectID, buildID, pipelineID int64, stage, strategy string) {
	t.Helper()
	ev := eventsOf(t, inst, projectID, buildID, builds.EventStuckStage)
	if len(ev) != 1 {
		t.Fatalf("build %d: %d stuck_stage events, want 1", buildID, len(ev))
	}
	d := ev[0].Detail
	if d["pipeline_id"] != float64(pipelineID) || d["stage"] != stage || d["strategy"] != strategy {
		t.Errorf("build %d: stuck_stage detail %v", buildID, d)
	}
}

func checkStuck(t *testing.T, inst *jobapitest.Instance) builds.StuckResult {
	t.Helper()
	res, err := inst.Server.Stuck.CheckOnce(t.Context())
	if err != nil {
		t.Fatalf("stuck check: %v", err)
	}
	return res
}

// TestStuckStagePessimistic: a pipeline whose current stage changed nothing for the timeout
// has its unfinished builds failed with stuck_or_timeout_failure, its later stages skipped
// and fails; pipelines that progressed within the timeout (through advancement, or only
// through an assignment) are left alone.
func TestStuckStagePessimistic(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	logs := &logBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Log: logs, Configure: func(c *server.Config) {
		c.StuckStageTimeout = 2 * time.Hour
	}})
	t0 := clock.Now()
	r := inst.NewRunner(t)
	late := inst.NewRunner(t, "late")
	stuck := createPipeline(t, inst, 30, "pessimistic", []string{"build", "test", "deploy"},
		job{"name": "a", "stage": "build", "script": "x"},
		job{"name": "b", "stage": "build", "script": "x", "tags": []string{"nobody"}},
		job{"name": "c", "stage": "build", "script": "x"},
		job{"name": "d", "stage": "test", "script": "x"},
		job{"name": "e", "stage": "deploy", "script": "x"})
	advanced := createPipeline(t, inst, 30, "", []string{"build", "test"},
		job{"name": "x", "stage": "build", "script": "x"},
		job{"name": "y", "stage": "test", "script": "x"})
	assigned := createPipeline(t, inst, 30, "", []string{"build"},
		job{"name": "z", "stage": "build", "script": "x", "tags": []string{"late"}})
	taken := r.TakeAll(t, 3)
	if taken["a"] == nil || taken["c"] == nil || taken["x"] == nil {
		t.Fatalf("took %v", taken)
	}
	clock.Set(t0.Add(time.Minute))
	r.Finish(t, taken["c"], runnerclient.StateSuccess, "")
	clock.Set(t0.Add(time.Hour))
	z := late.TakeNamed(t, "z") // an assignment is progress, though advance does not run
	clock.Set(t0.Add(90 * time.Minute))
	r.Finish(t, taken["x"], runnerclient.StateSuccess, "")

	// Just under the timeout since the last progress of the stuck pipeline (c at t0+1m):
	// only the pipeline whose recorded progress lags its assignment is looked at, and its
	// progress is caught up.
	clock.Set(t0.Add(2*time.Hour + time.Minute))
	if res := checkStuck(t, inst); res.Checked != 1 || res.Progress != 1 || len(res.Stuck) != 0 {
		t.Fatalf("check at t0+2h1m: %+v, want 1 checked with progress", res)
	}
	// A waiter parked on the stuck pipeline learns its end from the check.
	waited := make(chan waitCall, 1)
	go func() { waited <- callWait(inst.URL, stuck.ProjectID, stuck.ID, 30) }()
	time.Sleep(200 * time.Millisecond)

	clock.Set(t0.Add(2*time.Hour + 2*time.Minute))
	checked := time.Now()
	res := checkStuck(t, inst)
	bID := jobapitest.JobID(t, stuck, "b")
	want := builds.StuckPipeline{PipelineID: stuck.ID, ProjectID: 30, Stage: "build", Strategy: "pessimistic",
		Builds: []builds.StuckBuild{{ID: taken["a"].ID, Name: "a", Status: builds.StatusRunning}, {ID: bID, Name: "b", Status: builds.StatusPending}}}
	if res.Checked != 1 || res.Progress != 0 || len(res.Stuck) != 1 || !stuckEqual(res.Stuck[0], want) {
		t.Fatalf("check at t0+2h2m: %+v, want checked 1, stuck %+v", res, want)
	}
	w := <-waited
	if w.err != nil || w.res.Status != "failed" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 5 {
		t.Fatalf("waiter: %+v, %v", w.res, w.err)
	}
	t.Logf("stuck check → waiter answer %v", w.at.Sub(checked))
	if lat := w.at.Sub(checked); lat > time.Second {
		t.Errorf("waiter answered %v after the stuck check failed the pipeline", lat)
	}
	checkWaitAnswer(t, inst, stuck.ID, w.res)

	got := expect(t, inst, stuck, "failed", map[string]string{"a": "failed", "b": "failed", "c": "success", "d": "skipped", "e": "skipped"})
	for _, name := range []string{"a", "b"} {
		id := jobapitest.JobID(t, got, name)
		if d := inst.Job(t, 30, id); jobapitest.Reason(d) != builds.ReasonStuckOrTimeoutFailure || d.RetriedBy != nil {
			t.Errorf("job %s: reason %q retried_by %v", name, jobapitest.Reason(d), d.RetriedBy)
		}
		wantStuckEvent(t, inst, 30, id, stuck.ID, "build", "pessimistic")
	}
	if ev := eventsOf(t, inst, 30, taken["c"].ID, builds.EventStuckStage); len(ev) != 0 {
		t.Errorf("finished job c got stuck_stage events %v", ev)
	}
	wantAborted(t, r, taken["a"], "failed")
	wantStuckLog(t, logs, stuck.ID, "build", "pessimistic",
		fmt.Sprintf("%d a (running), %d b (pending)", taken["a"].ID, bID))

	expect(t, inst, advanced, "running", map[string]string{"x": "success", "y": "pending"})
	expect(t, inst, assigned, "running", map[string]string{"z": "running"})

	// The assignment at t0+1h re-armed the clock of its pipeline: stuck an hour later.
	if res := checkStuck(t, inst); res.Checked != 0 || len(res.Stuck) != 0 {
		t.Fatalf("second check at t0+2h2m: %+v", res)
	}
	clock.Set(t0.Add(3*time.Hour + 2*time.Minute))
	res = checkStuck(t, inst)
	if res.Checked != 1 || len(res.Stuck) != 1 || res.Stuck[0].PipelineID != assigned.ID ||
		!slices.Equal(res.Stuck[0].Builds, []builds.StuckBuild{{ID: z.ID, Name: "z", Status: builds.StatusRunning}}) {
		t.Fatalf("check at t0+3h2m: %+v", res)
	}
	expect(t, inst, assigned, "failed", map[string]string{"z": "failed"})
	wantAborted(t, late, z, "failed")
	// y has been pending since t0+1h30m: its pipeline is not stuck yet.
	expect(t, inst, advanced, "running", map[string]string{"y": "pending"})
}

func stuckEqual(a, b builds.StuckPipeline) bool {
	return a.PipelineID == b.PipelineID && a.ProjectID == b.ProjectID && a.Stage == b.Stage &&
		a.Strategy == b.Strategy && slices.Equal(a.Builds, b.Builds)
}

// TestStuckStageOptimistic: the optimistic strategy releases the next stage and leaves the
// stuck build running, for the no-updates reaper to fail later. A stage that already has a
// blocking failure does not let later stages run, stuck or not.
func TestStuckStageOptimistic(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	logs := &logBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Log: logs, Configure: func(c *server.Config) {
		c.StuckStageTimeout = 2 * time.Hour
		c.NoUpdatesTimeout = 3 * time.Hour
	}})
	t0 := clock.Now()
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 31, "optimistic", []string{"build", "test", "deploy"},
		job{"name": "a", "stage": "build", "script": "x"},
		job{"name": "c", "stage": "build", "script": "x"},
		job{"name": "d", "stage": "test", "script": "x"},
		job{"name": "e", "stage": "deploy", "script": "x"})
	broken := createPipeline(t, inst, 31, "optimistic", []string{"build", "test", "deploy"},
		job{"name": "f", "stage": "build", "script": "x"},
		job{"name": "g", "stage": "build", "script": "x"},
		job{"name": "h", "stage": "test", "script": "x"},
		job{"name": "k", "stage": "deploy", "script": "x"})
	taken := r.TakeAll(t, 4) // a, c, f, g
	clock.Set(t0.Add(time.Minute))
	r.Finish(t, taken["c"], runnerclient.StateSuccess, "")
	r.Finish(t, taken["f"], runnerclient.StateFailed, runnerclient.ReasonScriptFailure)

	clock.Set(t0.Add(2*time.Hour + 2*time.Minute))
	res := checkStuck(t, inst)
	if res.Checked != 2 || len(res.Stuck) != 2 || !res.Queued {
		t.Fatalf("check: %+v", res)
	}
	for _, s := range res.Stuck {
		var want builds.StuckPipeline
		switch s.PipelineID {
		case p.ID:
			want = builds.StuckPipeline{PipelineID: p.ID, ProjectID: 31, Stage: "build", Strategy: "optimistic",
				Builds: []builds.StuckBuild{{ID: taken["a"].ID, Name: "a", Status: builds.StatusRunning}}}
		case broken.ID:
			want = builds.StuckPipeline{PipelineID: broken.ID, ProjectID: 31, Stage: "build", Strategy: "optimistic",
				Builds: []builds.StuckBuild{{ID: taken["g"].ID, Name: "g", Status: builds.StatusRunning}}}
		}
		if !stuckEqual(s, want) {
			t.Errorf("stuck %+v, want %+v", s, want)
		}
	}
	expect(t, inst, p, "running", map[string]string{"a": "running", "c": "success", "d": "pending", "e": "created"})
	wantStuckEvent(t, inst, 31, taken["a"].ID, p.ID, "build", "optimistic")
	wantStuckLog(t, logs, p.ID, "build", "optimistic", fmt.Sprintf("%d a (running)", taken["a"].ID))
	// f failed without allow_failure: the build stage has failed whatever g does.
	expect(t, inst, broken, "running", map[string]string{"f": "failed", "g": "running", "h": "skipped", "k": "skipped"})
	wantStuckLog(t, logs, broken.ID, "build", "optimistic", fmt.Sprintf("%d g (running)", taken["g"].ID))

	// The stuck build keeps its runner; the pipeline goes on around it.
	if u, err := r.UpdateJob(t.Context(), taken["a"], runnerclient.StateRunning, runnerclient.UpdateOptions{}); err != nil || u.Code != 200 || u.JobStatus != "running" {
		t.Fatalf("stuck build a: PUT running answered %d %q, %v", u.Code, u.JobStatus, err)
	}
	d := r.TakeNamed(t, "d")
	r.Finish(t, d, runnerclient.StateSuccess, "")
	e := r.TakeNamed(t, "e")
	r.Finish(t, e, runnerclient.StateSuccess, "")
	r.NoJob(t)
	got := expect(t, inst, p, "running", map[string]string{"a": "running", "d": "success", "e": "success"})
	w := callWait(inst.URL, p.ProjectID, p.ID, 0)
	if w.err != nil || w.res.JobsRemaining != 1 || w.res.Status != "running" {
		t.Fatalf("wait: %+v %v", w.res, w.err)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
	// Moving on is done once: later checks do not report the stage again.
	clock.Set(t0.Add(4*time.Hour + 5*time.Minute))
	if res := checkStuck(t, inst); len(res.Stuck) != 0 {
		t.Fatalf("second check: %+v", res)
	}

	// The no-updates reaper fails the stuck builds (a was touched at t0+2h2m), and with them
	// the pipelines.
	clock.Set(t0.Add(5*time.Hour + 3*time.Minute))
	rr, err := inst.Server.Reaper.ReapOnce(t.Context())
	if err != nil || rr.NoUpdates != 2 || rr.ExecutionTimeout+rr.StuckPending+rr.Canceled+rr.Retried != 0 {
		t.Fatalf("reap: %+v, %v", rr, err)
	}
	expect(t, inst, p, "failed", map[string]string{"a": "failed", "c": "success", "d": "success", "e": "success"})
	if dd := inst.Job(t, 31, jobapitest.JobID(t, got, "a")); jobapitest.Reason(dd) != builds.ReasonNoUpdatesRunning {
		t.Errorf("a: reason %q", jobapitest.Reason(dd))
	}
	wantAborted(t, r, taken["a"], "failed")
	expect(t, inst, broken, "failed", map[string]string{"f": "failed", "g": "failed", "h": "skipped", "k": "skipped"})
}

// TestStuckStageTimeoutZeroIsOff: JOBAPI_STUCK_STAGE_TIMEOUT=0 turns the check off, as a
// zero threshold turns a reaper off, instead of finding every pipeline stuck at once.
func TestStuckStageTimeoutZeroIsOff(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) {
		c.StuckStageTimeout = 0
		c.NoUpdatesTimeout = 0
	}})
	t0 := clock.Now()
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 32, "", []string{"build", "test"},
		job{"name": "a", "stage": "build", "script": "x", "timeout": "10h"},
		job{"name": "b", "stage": "test", "script": "x"})
	r.TakeNamed(t, "a")
	clock.Set(t0.Add(3 * time.Hour))
	if res := checkStuck(t, inst); res.Checked != 0 || len(res.Stuck) != 0 {
		t.Fatalf("check with timeout 0: %+v", res)
	}
	if res, err := inst.Server.Reaper.ReapOnce(t.Context()); err != nil || reapCounts(res) != reapCounts(builds.ReapResult{}) {
		t.Fatalf("reap with no-updates timeout 0: %+v, %v", res, err)
	}
	expect(t, inst, p, "running", map[string]string{"a": "running", "b": "created"})
}
