package tracetest_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// TestArchiveOnEveryFinish: whichever way a running build ends, its log is archived into
// the object store (at once after the runner's final update, by the pass after the
// others) and its live chunks dropped; a build that never ran has nothing to archive and
// leaves the list all the same.
func TestArchiveOnEveryFinish(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// end finishes the running job; it says whether the archive follows at once (the
		// runner's final update on this replica) or needs the pass.
		end    func(t *testing.T, e *env, job *runnerclient.Job) (immediate bool)
		status string
	}{
		{name: "final update success", status: "success", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			e.r.Finish(t, job, runnerclient.StateSuccess, "")
			return true
		}},
		{name: "final update failed", status: "failed", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			e.r.Finish(t, job, runnerclient.StateFailed, "script_failure")
			return true
		}},
		{name: "operator cancel, then the runner's last update", status: "canceled", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			e.inst.MustDo(t, http.StatusOK, "POST", jobPath(1, job.ID)+"/cancel", nil, nil)
			e.r.Finish(t, job, runnerclient.StateFailed, "job_canceled")
			return true
		}},
		{name: "reaper: no updates", status: "failed", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			e.clock.Store(int64(3 * time.Hour))
			if _, err := e.inst.Reaper.ReapOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
			return false
		}},
		{name: "stuck stage, pessimistic", status: "failed", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			e.clock.Store(int64(e.inst.Config.StuckStageTimeout + time.Minute))
			if _, err := e.inst.Stuck.CheckOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
			return false
		}},
		{name: "runner deleted", status: "failed", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			e.inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/runners/%d", e.runnerID), nil, nil)
			return false
		}},
		{name: "trace limit", status: "failed", end: func(t *testing.T, e *env, job *runnerclient.Job) bool {
			res := e.r.Patch(t, job, len(e.log), string(make([]byte, 200<<10)))
			if res.Code != http.StatusForbidden {
				t.Fatalf("PATCH past the limit: %d, want 403", res.Code)
			}
			return true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, jobapitest.Options{Configure: func(c *server.Config) { c.TraceLimit = 64 << 10 }})
			job := e.r.TakeNamed(t, "build")
			appendLog(t, e.r, job, e.log)
			immediate := c.end(t, e, job)
			if d := e.inst.Job(t, 1, job.ID); d.Status != c.status {
				t.Fatalf("job %s, want %s", d.Status, c.status)
			}
			if immediate {
				waitArchived(t, e.inst, 1, job.ID)
			} else {
				if _, listed := liveState(t, e.inst, job.ID); !listed || traceArtifact(t, e.inst, 1, job.ID) != nil {
					t.Fatalf("before the pass: listed %v; want listed, not archived", listed)
				}
				if resp, b := getTrace(t, e.inst, 1, job.ID); resp.StatusCode != http.StatusOK || string(b) != string(e.log) {
					t.Fatalf("the live log before the pass: %d, %d bytes; want the whole log", resp.StatusCode, len(b))
				}
				passOnce(t, e.inst)
			}
			wantArchived(t, e.inst, 1, job.ID, e.log)
		})
	}

	t.Run("canceled before it ran", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, jobapitest.Options{})
		p := e.inst.Pipeline(t, e.p)
		id := p.Jobs[0].ID
		e.inst.MustDo(t, http.StatusOK, "POST", jobPath(1, id)+"/cancel", nil, nil)
		// The cancel lists the build (the trigger the cases above check before their pass)
		// and asks this replica's worker to archive at once; an empty log is done in
		// milliseconds, so whether it is still listed here is a race, not asserted (it
		// failed a CI run). The pass does the same if the worker did not.
		passOnce(t, e.inst)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, listed := liveState(t, e.inst, id); !listed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("an empty log still listed 10 s after the cancel")
			}
		}
		if a := traceArtifact(t, e.inst, 1, id); a != nil {
			t.Errorf("an empty log archived as %+v", *a)
		}
		if resp, b := getTrace(t, e.inst, 1, id); resp.StatusCode != http.StatusOK || len(b) != 0 {
			t.Errorf("trace of a job that never ran: %d, %q", resp.StatusCode, b)
		}
	})
}

// env is one replica with a clock the test moves, a runner and a one-job pipeline.
type env struct {
	inst     *jobapitest.Instance
	clock    *atomic.Int64
	r        *jobapitest.Runner
	runnerID int64
	p        api.Pipeline
	log      []byte
}

func newEnv(t *testing.T, o jobapitest.Options) *env {
	t.Helper()
	e := &env{clock: &atomic.Int64{}, log: makeLog(40<<10, t.Name())}
	o.Now = func() time.Time { return time.Now().Add(time.Duration(e.clock.Load())) }
	e.inst = start(t, o, nil)
	id, token := e.inst.CreateRunner(t)
	e.runnerID = id
	e.r = jobapitest.NewRunner(t, e.inst.URL, token, "s_tracetest01")
	e.p = e.inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "build", "stage": "build", "script": "make"})
	return e
}
