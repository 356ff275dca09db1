package sourcetest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// nextAt is the first time after t at hour:00 UTC.
func nextAt(t time.Time, hour int) time.Time {
	n := time.Date(t.Year(), t.Month(), t.Day(), hour, 0, 0, 0, time.UTC)
	for !n.After(t) {
		n = n.AddDate(0, 0, 1)
	}
	return n
}

func schedulePipelines(t *testing.T, inst *jobapitest.Instance, projectID int64) int {
	t.Helper()
	return jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM pipelines WHERE project_id = $1 AND source = 'schedule'`, projectID)
}

// tickAll runs one schedule pass on every replica at once and adds up what they did.
func tickAll(t *testing.T, replicas ...*jobapitest.Instance) schedules.TickResult {
	t.Helper()
	var mu sync.Mutex
	var total schedules.TickResult
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := r.Schedules.TickOnce(context.Background())
			if err != nil {
				t.Errorf("tick: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			total.Due += res.Due
			total.Claimed += res.Claimed
			total.Started += res.Started
			total.Failed += res.Failed
		}()
	}
	close(start)
	wg.Wait()
	return total
}

// TestPipelineScheduleTicksOnce: three replicas race the same due schedule and exactly one
// pipeline is created; three missed ticks (every replica down for days) run once, and
// next_run_at moves to the cron's first time after now; the deadline survives every replica
// stopping; the pipeline is the repository's at the ref with CI_PIPELINE_SOURCE schedule
// and the schedule's variables; an inactive schedule does not tick; the replica's own
// worker ticks without being asked.
func TestPipelineScheduleTicksOnce(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now})
	replicas := []*jobapitest.Instance{inst, inst.Replica(t, jobapitest.Options{Now: clock.Now}), inst.Replica(t, jobapitest.Options{Now: clock.Now})}
	project, sha := repoProject(t, inst, "nightly", sourceCI)
	base := fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules", project.ID)

	var sc api.PipelineSchedule
	inst.MustDo(t, http.StatusCreated, "POST", base, map[string]any{"description": "nightly", "ref": "main", "cron": "0 2 * * *"}, &sc)
	if want := nextAt(clock.Now(), 2); !sc.NextRunAt.Equal(want) || !sc.Active || sc.CronTimezone != "UTC" {
		t.Fatalf("created %+v, want active, UTC, next_run_at %s", sc, want)
	}
	one := fmt.Sprintf("%s/%d", base, sc.ID)
	inst.MustDo(t, http.StatusCreated, "POST", one+"/variables", map[string]any{"key": "NIGHTLY", "value": "yes"}, nil)
	var off api.PipelineSchedule
	inst.MustDo(t, http.StatusCreated, "POST", base, map[string]any{"description": "off", "ref": "main", "cron": "0 2 * * *", "active": false}, &off)

	if res := tickAll(t, replicas...); res.Claimed != 0 || schedulePipelines(t, inst, project.ID) != 0 {
		t.Fatalf("before its time: %+v", res)
	}
	// Three ticks pass with no replica running a pass: one pipeline, not three.
	clock.Set(sc.NextRunAt.Add(3*24*time.Hour + 30*time.Minute))
	res := tickAll(t, replicas...)
	if res.Claimed != 1 || res.Started != 1 || res.Failed != 0 {
		t.Fatalf("three replicas on one due schedule: %+v, want one claim and one pipeline", res)
	}
	if n := schedulePipelines(t, inst, project.ID); n != 1 {
		t.Fatalf("%d schedule pipelines after three missed ticks, want 1", n)
	}
	var got api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "GET", one, nil, &got)
	if want := nextAt(clock.Now(), 2); !got.NextRunAt.Equal(want) {
		t.Errorf("next_run_at %s after the late tick, want the first 02:00 after now, %s", got.NextRunAt, want)
	}
	if got.LastPipeline == nil || got.LastPipeline.SHA != sha || got.LastPipeline.Ref != "main" {
		t.Fatalf("last_pipeline %+v, want main at %s", got.LastPipeline, sha)
	}
	if len(got.Variables) != 1 || got.Variables[0] != (api.PipelineScheduleVariable{Key: "NIGHTLY", Value: "yes", VariableType: "env_var"}) {
		t.Errorf("variables %+v", got.Variables)
	}
	if res := tickAll(t, replicas...); res.Claimed != 0 || schedulePipelines(t, inst, project.ID) != 1 {
		t.Errorf("a second pass at the same time: %+v, want nothing", res)
	}

	r := inst.NewRunner(t)
	jobs := r.TakeAll(t, 2)
	for name, job := range jobs {
		if v, _ := job.Variable("CI_PIPELINE_SOURCE"); v != "schedule" || job.JobInfo.PipelineID != got.LastPipeline.ID {
			t.Errorf("job %s: CI_PIPELINE_SOURCE %q in pipeline %d", name, v, job.JobInfo.PipelineID)
		}
		r.Finish(t, job, "success", "")
	}
	if job := jobs["scheduled-only"]; job == nil {
		t.Errorf("took %v, want always and scheduled-only", jobs)
	} else if v, _ := job.Variable("NIGHTLY"); v != "yes" {
		t.Errorf("NIGHTLY = %q, want the schedule's yes", v)
	}

	// Every replica stops; the deadline is in Postgres, and a new replica ticks it once.
	for _, rep := range replicas {
		_ = rep.Close()
	}
	fresh := inst.Replica(t, jobapitest.Options{Now: clock.Now})
	later := fresh.Replica(t, jobapitest.Options{Now: clock.Now})
	clock.Set(got.NextRunAt.Add(time.Minute))
	if res := tickAll(t, fresh, later); res.Claimed != 1 || res.Started != 1 {
		t.Fatalf("after a restart: %+v, want one tick", res)
	}
	if n := schedulePipelines(t, fresh, project.ID); n != 2 {
		t.Fatalf("%d schedule pipelines after the second tick, want 2", n)
	}

	// The replica's own worker (with the sweeper) ticks by itself.
	worker := fresh.Replica(t, jobapitest.Options{Now: clock.Now, Sweeper: true,
		Configure: func(c *server.Config) { c.MaintenanceInterval = 100 * time.Millisecond }})
	clock.Set(nextAt(clock.Now(), 2).Add(time.Second))
	testenv.Eventually(t, 20*time.Second, "the schedule worker's tick", func() bool { return schedulePipelines(t, worker, project.ID) == 3 })
	testenv.Eventually(t, 5*time.Second, "the tick counted", func() bool {
		return worker.Metric(t, `jobapi_pipeline_schedule_ticks_total{outcome="started"}`) == 1
	})
	if res := tickAll(t, fresh, later, worker); res.Claimed != 0 || schedulePipelines(t, worker, project.ID) != 3 {
		t.Errorf("a pass after the worker's tick: %+v, want nothing more", res)
	}
	var inactive api.PipelineSchedule
	fresh.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("%s/%d", base, off.ID), nil, &inactive)
	if inactive.LastPipeline != nil || inactive.Active {
		t.Errorf("inactive schedule ran: %+v", inactive)
	}
}

// TestPipelineScheduleTickThatCannotStart: a tick whose pipeline cannot be created (the
// schedule's branch is gone) is claimed, counted failed, and not tried again: the schedule
// runs at its next time, as GitLab's does.
func TestPipelineScheduleTickThatCannotStart(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now})
	project, _ := repoProject(t, inst, "gone", sourceCI)
	var sc api.PipelineSchedule
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules", project.ID),
		map[string]any{"description": "gone", "ref": "deleted-branch", "cron": "0 2 * * *"}, &sc)
	clock.Set(sc.NextRunAt.Add(time.Minute))
	if res := tickAll(t, inst); res.Claimed != 1 || res.Failed != 1 || res.Started != 0 {
		t.Fatalf("tick on a missing branch: %+v, want claimed and failed", res)
	}
	var got api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules/%d", project.ID, sc.ID), nil, &got)
	if want := nextAt(clock.Now(), 2); !got.NextRunAt.Equal(want) || got.LastPipeline != nil {
		t.Errorf("after the failed tick: %+v, want next_run_at %s and no pipeline", got, want)
	}
	if res := tickAll(t, inst); res.Claimed != 0 || schedulePipelines(t, inst, project.ID) != 0 {
		t.Errorf("the failed tick was tried again: %+v", res)
	}
}

// TestPipelineScheduleAPI: GitLab's calls on schedules and their variables, in JSON and
// form bodies; a bad cron or time zone is a 400 naming the field; play creates the
// pipeline at once and leaves next_run_at; take_ownership says why it cannot.
func TestPipelineScheduleAPI(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	project, sha := repoProject(t, inst, "sched", sourceCI)
	base := fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules", project.ID)
	const form = "application/x-www-form-urlencoded"

	resp, b := inst.Do(t, "POST", base, url.Values{"description": {"weekday mornings"}, "ref": {"main"}, "cron": {"30 9 * * 1-5"},
		"cron_timezone": {"Europe/Berlin"}}.Encode(), "Content-Type", form)
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	sc := decode[api.PipelineSchedule](t, b)
	// Made with the admin token: its owner is the admin token's holder, GitLab's user 1.
	if sc.Owner == nil || sc.Owner.ID != 1 || sc.Owner.Username != "admin" {
		t.Errorf("created schedule's owner = %+v, want the admin (user 1)", sc.Owner)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if local := sc.NextRunAt.In(berlin); local.Hour() != 9 || local.Minute() != 30 || local.Weekday() == time.Saturday ||
		local.Weekday() == time.Sunday || !sc.NextRunAt.After(time.Now()) {
		t.Errorf("next_run_at %s (%s in Berlin), want a weekday 09:30 there", sc.NextRunAt, local)
	}
	one := fmt.Sprintf("%s/%d", base, sc.ID)

	for _, c := range []struct {
		body map[string]any
		says string
	}{
		{map[string]any{"description": "x", "ref": "main", "cron": "61 * * * *"}, "cron "},
		{map[string]any{"description": "x", "ref": "main", "cron": "* * * *"}, "cron "},
		{map[string]any{"description": "x", "ref": "main", "cron": "0 * * * *", "cron_timezone": "Mars/Olympus"}, "cron_timezone"},
		{map[string]any{"description": "x", "ref": "main"}, "cron is missing"},
		{map[string]any{"ref": "main", "cron": "0 * * * *"}, "description is missing"},
		{map[string]any{"description": "x", "cron": "0 * * * *"}, "ref is missing"},
		{map[string]any{"description": "x", "ref": "-bad", "cron": "0 * * * *"}, "ref"},
	} {
		resp, b := inst.Do(t, "POST", base, c.body)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.HasPrefix(msg, c.says) && !strings.Contains(msg, c.says) {
			t.Errorf("create %v: %q, want it to name %q", c.body, msg, c.says)
		}
	}
	resp, b = inst.Do(t, "PUT", one, map[string]any{"cron_timezone": "Nowhere/Never"})
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.HasPrefix(msg, "cron_timezone") {
		t.Errorf("edit to a bad zone: %q", msg)
	}

	var edited api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "PUT", one, map[string]any{"cron": "0 3 * * *", "cron_timezone": "UTC", "description": "nightly"}, &edited)
	if want := nextAt(time.Now().UTC(), 3); !edited.NextRunAt.Equal(want) || edited.Description != "nightly" || edited.Ref != "main" {
		t.Errorf("edited %+v, want nightly at 03:00 UTC (%s)", edited, want)
	}

	inst.MustDo(t, http.StatusCreated, "POST", one+"/variables", map[string]any{"key": "A", "value": "1"}, nil)
	resp, b = inst.Do(t, "POST", one+"/variables", url.Values{"key": {"B"}, "value": {"2"}, "variable_type": {"file"}}.Encode(), "Content-Type", form)
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	resp, b = inst.Do(t, "POST", one+"/variables", map[string]any{"key": "A", "value": "again"})
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "taken") {
		t.Errorf("duplicate key: %q", msg)
	}
	resp, b = inst.Do(t, "POST", one+"/variables", map[string]any{"key": "BAD-KEY", "value": "x"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	var v api.PipelineScheduleVariable
	inst.MustDo(t, http.StatusOK, "PUT", one+"/variables/A", map[string]any{"value": "11"}, &v)
	if v.Value != "11" || v.VariableType != "env_var" {
		t.Errorf("edited variable %+v", v)
	}
	inst.MustDo(t, http.StatusAccepted, "DELETE", one+"/variables/B", nil, &v)
	inst.MustDo(t, http.StatusNotFound, "DELETE", one+"/variables/B", nil, nil)

	var played struct {
		Message    string `json:"message"`
		PipelineID int64  `json:"pipeline_id"`
	}
	inst.MustDo(t, http.StatusCreated, "POST", one+"/play", nil, &played)
	var p api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", project.ID, played.PipelineID), nil, &p)
	if p.Source != "schedule" || p.Sha != sha || strings.Join(jobNames(p), ",") != "always,scheduled-only" {
		t.Errorf("played pipeline: source %q sha %s jobs %s", p.Source, p.Sha, strings.Join(jobNames(p), ","))
	}
	var after api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "GET", one, nil, &after)
	if !after.NextRunAt.Equal(edited.NextRunAt) || after.LastPipeline == nil || after.LastPipeline.ID != p.ID {
		t.Errorf("after play: %+v, want next_run_at unchanged and last_pipeline %d", after, p.ID)
	}
	if len(after.Variables) != 1 || after.Variables[0].Key != "A" {
		t.Errorf("variables after edits: %+v", after.Variables)
	}
	var second struct {
		PipelineID int64 `json:"pipeline_id"`
	}
	inst.MustDo(t, http.StatusCreated, "POST", one+"/play", nil, &second)
	resp, b = inst.Do(t, "GET", one+"/pipelines?sort=desc&per_page=1", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if ps := decode[[]api.Pipeline](t, b); len(ps) != 1 || ps[0].ID != second.PipelineID || resp.Header.Get("X-Total") != "2" ||
		resp.Header.Get("X-Next-Page") != "2" {
		t.Errorf("the schedule's pipelines, newest first, one a page: %+v (X-Total %s, X-Next-Page %s), want %d of 2",
			ps, resp.Header.Get("X-Total"), resp.Header.Get("X-Next-Page"), second.PipelineID)
	}
	var ps []api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", one+"/pipelines", nil, &ps)
	if len(ps) != 2 || ps[0].ID != p.ID || ps[1].ID != second.PipelineID {
		t.Errorf("the schedule's pipelines: %+v, want %d then %d", ps, p.ID, second.PipelineID)
	}
	resp, b = inst.Do(t, "GET", one+"/pipelines?sort=sideways", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	resp, b = inst.Do(t, "GET", base+"?per_page=1&page=3", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if got := decode[[]api.PipelineSchedule](t, b); len(got) != 0 || resp.Header.Get("X-Total") != "1" {
		t.Errorf("schedules past the last page: %+v, X-Total %s", got, resp.Header.Get("X-Total"))
	}

	resp, b = inst.Do(t, "POST", one+"/take_ownership", nil)
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusNotImplemented); !strings.Contains(msg, "stays who created") {
		t.Errorf("take_ownership: %q", msg)
	}
	var list []api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "GET", base+"?scope=inactive", nil, &list)
	if len(list) != 0 {
		t.Errorf("inactive: %+v", list)
	}
	inst.MustDo(t, http.StatusOK, "PUT", one, map[string]any{"active": false}, nil)
	inst.MustDo(t, http.StatusOK, "GET", base+"?scope=inactive", nil, &list)
	if len(list) != 1 || list[0].Active {
		t.Errorf("inactive after deactivation: %+v", list)
	}
	resp, b = inst.Do(t, "GET", base+"?scope=sometimes", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)

	// A schedule on a ref the repository lacks: play is a 400 naming it, nothing created.
	var gone api.PipelineSchedule
	inst.MustDo(t, http.StatusCreated, "POST", base, map[string]any{"description": "gone", "ref": "no-such-branch", "cron": "@daily"}, &gone)
	resp, b = inst.Do(t, "POST", fmt.Sprintf("%s/%d/play", base, gone.ID), nil)
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "no-such-branch") {
		t.Errorf("play on a missing ref: %q", msg)
	}

	inst.MustDo(t, http.StatusNoContent, "DELETE", one, nil, nil)
	inst.MustDo(t, http.StatusNotFound, "GET", one, nil, nil)
	inst.MustDo(t, http.StatusNotFound, "POST", one+"/play", nil, nil)
	inst.MustDo(t, http.StatusNotFound, "GET", "/api/v4/projects/999999/pipeline_schedules", nil, nil)

	// Every change and play that succeeded is in the audit log, by the admin token, on the
	// project; the refused ones (bad cron or zone, a duplicate key, a play on a missing ref)
	// are not, and no variable's value is.
	resp, b = inst.Do(t, "GET", "/api/v4/admin/events?per_page=100", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	counts := map[string]int{}
	for _, e := range decode[[]api.AuditEvent](t, b) {
		if !strings.HasPrefix(e.Action, "schedule_") {
			continue
		}
		counts[e.Action]++
		if !strings.HasPrefix(e.Actor, "admin (request ") || e.Target != fmt.Sprintf("project:%d", project.ID) {
			t.Errorf("audit %s: actor %q target %q, want the admin token on project:%d", e.Action, e.Actor, e.Target, project.ID)
		}
		if _, ok := e.Detail["value"]; ok {
			t.Errorf("audit %s keeps a variable's value: %+v", e.Action, e.Detail)
		}
		if e.Action == "schedule_played" && e.Detail["pipeline_id"] != float64(p.ID) && e.Detail["pipeline_id"] != float64(second.PipelineID) {
			t.Errorf("schedule_played names pipeline %v, want %d or %d", e.Detail["pipeline_id"], p.ID, second.PipelineID)
		}
	}
	want := map[string]int{"schedule_created": 2, "schedule_updated": 2, "schedule_played": 2, "schedule_deleted": 1,
		"schedule_variable_created": 2, "schedule_variable_updated": 1, "schedule_variable_deleted": 1}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("schedule audit events by action (-want +got):\n%s", diff)
	}
}

// TestPythonGitlabTriggersAndSchedules runs python-gitlab (Debian's python3-gitlab) on
// trigger tokens (list, create, trigger_pipeline, delete) and pipeline schedules (list,
// create, variables.create, play, get, delete, and the schedule's pipelines through http_list)
// against a project with a repository (testdata/triggers_schedules.py).
func TestPythonGitlabTriggersAndSchedules(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	project, _ := repoProject(t, inst, "py", sourceCI)
	out, err := exec.Command(python, "testdata/triggers_schedules.py", inst.URL, jobapitest.AdminToken, fmt.Sprint(project.ID)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}
