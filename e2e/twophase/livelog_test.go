package twophase_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestTransitionArmsLiveLog: the ack (two-phase) and the claim (one phase) start the
// build's live log in Redis, so that the runner's first PATCH is a Redis append with no
// state check against Postgres (that check would move builds.updated_at, the liveness it
// records), and a cancel right after the ack reaches the runner on its next PATCH.
func TestTransitionArmsLiveLog(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	const project = 31
	enableFlag(t, inst, project)
	inst.WaitFlags(t)
	live := redisstore.New(inst.Redis, inst.Config.RedisKeyPrefix)
	ctx := context.Background()
	updatedAt := func(id int64) int {
		return jobapitest.QueryInt(t, inst.Pool, `SELECT (extract(epoch FROM updated_at) * 1e6)::bigint FROM builds WHERE id = $1`, id)
	}
	// firstPatch checks the armed tail, sends the runner's first PATCH and requires that
	// Postgres was not asked.
	firstPatch := func(t *testing.T, r *jobapitest.Runner, job *runnerclient.Job) {
		t.Helper()
		if base, data, ok, err := live.Tail(ctx, job.ID); err != nil || !ok || base != 0 || len(data) != 0 {
			t.Fatalf("live tail of job %d before its first PATCH: base %d, %d bytes, ok=%v, err=%v; want an empty armed tail",
				job.ID, base, len(data), ok, err)
		}
		before := updatedAt(job.ID)
		res, err := r.PatchTrace(ctx, job, 0, []byte("first line\n"))
		if err != nil || res.Code != http.StatusAccepted {
			t.Fatalf("first PATCH of job %d: %d %v", job.ID, res.Code, err)
		}
		if after := updatedAt(job.ID); after != before {
			t.Errorf("job %d: updated_at moved by %d µs at the first PATCH: it checked its state in Postgres", job.ID, after-before)
		}
		if _, data, _, _ := live.Tail(ctx, job.ID); string(data) != "first line\n" {
			t.Errorf("job %d: live tail %q after the first PATCH", job.ID, data)
		}
	}

	t.Run("ack", func(t *testing.T) {
		tag := uniqueTag()
		r := taggedRunner(t, inst, tag, true)
		inst.CreatePipeline(t, project, []string{"test"}, jobDef("build", tag))
		job := take(t, r)
		if _, _, ok, err := live.Tail(ctx, job.ID); ok || err != nil {
			t.Fatalf("job %d waiting for its ack has a live tail (err %v)", job.ID, err)
		}
		jobapitest.WantUpdate(t, "ack", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
		firstPatch(t, r, job)

		inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/cancel", project, job.ID), nil, nil)
		res, err := r.PatchTrace(ctx, job, len("first line\n"), []byte("second line\n"))
		if err != nil || res.Code != http.StatusAccepted || !res.CancelRequested {
			t.Fatalf("PATCH after the cancel: %d cancel=%v status %q (%v); want 202 telling the runner to cancel",
				res.Code, res.CancelRequested, res.JobStatus, err)
		}
	})

	t.Run("one phase", func(t *testing.T) {
		tag := uniqueTag()
		r := taggedRunner(t, inst, tag, false)
		inst.CreatePipeline(t, project, []string{"test"}, jobDef("build", tag))
		job := take(t, r)
		if j := inst.Job(t, project, job.ID); j.Status != stRunning {
			t.Fatalf("one-phase job %d is %s, want running", job.ID, j.Status)
		}
		firstPatch(t, r, job)
	})
}
