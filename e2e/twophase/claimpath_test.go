package twophase_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

const jobRequestRoute = "/api/v4/jobs/request"

// TestClaimFollowsTheFlagsTargeting: a two-phase-capable runner's claim is one statement
// while allow_runner_job_acknowledgement's answer cannot depend on the project (on or off
// for everyone, never set), and the transaction that evaluates the flag for the locked
// candidate's project while it is targeted (project or runner actors, a percentage). Each change of the
// flag is honoured from the claim after the provider reloads, and every assignment is
// counted once in the evaluation metrics, whichever way it was decided.
func TestClaimFollowsTheFlagsTargeting(t *testing.T) {
	t.Parallel()
	rec := &statementsByRequest{}
	inst := jobapitest.Start(t, jobapitest.Options{Tracer: rec})
	tag := uniqueTag()
	runnerID, token := inst.CreateRunner(t, tag)
	r := newRunner(t, inst.URL, token, "s_"+tag, true)
	const targeted, other = 41, 42
	oneStatement := []string{"WITH c AS ("}
	perCandidate := []string{"begin", "SELECT b.id, b.project_id FROM builds b", "WITH b AS (", "commit"}

	setFlag := func(body map[string]any) {
		t.Helper()
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/features/"+flagName, body, nil)
		inst.WaitFlags(t)
	}
	on, off := 0, 0
	step := func(name string, project int64, wantTwoPhase bool, wantSQL []string) {
		t.Helper()
		inst.CreatePipeline(t, project, []string{"test"}, jobDef("build", tag))
		rec.claim()
		job := take(t, r)
		got := rec.claim()
		if len(got) != len(wantSQL) {
			t.Fatalf("%s: the claim ran %d statements %q, want %d starting %q", name, len(got), got, len(wantSQL), wantSQL)
		}
		for i, q := range got {
			if !strings.HasPrefix(q, wantSQL[i]) {
				t.Fatalf("%s: statement %d is %.60q, want it to start %q", name, i+1, q, wantSQL[i])
			}
		}
		j := inst.Job(t, project, job.ID)
		ev := oneEvent(t, inst.Events(t, project, job.ID), "assigned")
		if status := map[bool]string{true: stWaiting, false: stRunning}[wantTwoPhase]; j.Status != status ||
			j.TwoPhase != wantTwoPhase || ev.Detail["two_phase"] != wantTwoPhase || (j.StartedAt == nil) != wantTwoPhase {
			t.Fatalf("%s: job %s two_phase %v started_at %v, event %v; want %s", name, j.Status, j.TwoPhase, j.StartedAt, ev.Detail, status)
		}
		if wantTwoPhase {
			on++
			if ackKeyTTL(t, inst, job.ID) <= 0 {
				t.Fatalf("%s: waiting job %d has no ack key", name, job.ID)
			}
			jobapitest.WantUpdate(t, name+": ack", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
		} else {
			off++
		}
		r.Finish(t, job, stSuccess, "")
	}

	// A first request loads what a replica keeps (the ID token signer's key, the runner,
	// its manager) and finds nothing.
	r.NoJob(t)
	step("never set", other, false, oneStatement)
	setFlag(map[string]any{"value": true})
	step("on for everyone", other, true, oneStatement)
	setFlag(map[string]any{"value": false})
	step("disabled", other, false, oneStatement)
	setFlag(map[string]any{"value": true, "project": "41"})
	step("on for one project: that project's build", targeted, true, perCandidate)
	step("on for one project: another's build", other, false, perCandidate)
	setFlag(map[string]any{"value": true})
	step("on for everyone again", other, true, oneStatement)
	setFlag(map[string]any{"value": false})
	// A runner actor holds for every project of this runner's, but that is the provider's
	// business: targeting is asked about per candidate.
	setFlag(map[string]any{"value": true, "runner": strconv.FormatInt(runnerID, 10)})
	step("on for this runner", other, true, perCandidate)
	setFlag(map[string]any{"value": false})
	setFlag(map[string]any{"value": 100, "key": "percentage_of_actors"})
	step("100% of projects", other, true, perCandidate)
	inst.MustDo(t, http.StatusNoContent, "DELETE", "/api/v4/features/"+flagName, nil, nil)
	inst.WaitFlags(t)
	step("deleted", targeted, false, oneStatement)

	for result, want := range map[string]int{"on": on, "off": off} {
		if got := inst.Metric(t, `jobapi_flag_evaluations_total{flag="`+flagName+`",result="`+result+`"}`); got != float64(want) {
			t.Errorf("flag evaluations %s = %v, want %d: one per assignment", result, got, want)
		}
	}
	if got := inst.Metric(t, `jobapi_flag_fallbacks_total{flag="`+flagName+`"}`); got != 0 {
		t.Errorf("flag fallbacks = %v, want 0", got)
	}
}
