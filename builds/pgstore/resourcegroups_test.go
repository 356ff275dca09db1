package pgstore

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/resourcegroups"
	"github.com/jobapi/jobapi/secrettoken"
)

const sWaitRes = builds.StatusWaitingForResource

// deployPipeline stores a pipeline whose stage-1 job build and stage-2 job deploy; deploy
// (and build, when both) hold resource group key.
func (f *dagFixture) deployPipeline(key string, buildToo bool) builds.Pipeline {
	f.t.Helper()
	b := builds.JobDefinition{Name: "build", Stage: "build"}
	if buildToo {
		b.ResourceGroup = key
	}
	return f.create("", []string{"build", "deploy"}, b, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: key})
}

// setMode changes the group's process mode in the store.
func (f *dagFixture) setMode(key, mode string) bool {
	f.t.Helper()
	_, queued, err := f.s.SetProcessMode(f.ctx, 1, key, mode, f.tick())
	if err != nil {
		f.t.Fatal(err)
	}
	return queued
}

// TestResourceGroupOneHolderAcrossPipelines: jobs of one group in three pipelines take it
// one at a time, in the unordered mode the one waiting longest next; an end by any path
// (success, failure, cancel) hands it on in the same transaction.
func TestResourceGroupOneHolderAcrossPipelines(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	var ps []builds.Pipeline
	for range 3 {
		p := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "production"})
		ps = append(ps, p)
	}
	f.expect(ps[0], builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	f.expect(ps[1], builds.PipelinePending, map[string]builds.Status{"deploy": sWaitRes})
	f.expect(ps[2], builds.PipelinePending, map[string]builds.Status{"deploy": sWaitRes})

	first := f.run("deploy")
	if first.PipelineID != ps[0].ID {
		t.Fatalf("claimed pipeline %d's deploy; want %d's", first.PipelineID, ps[0].ID)
	}
	// Nothing else of the group can be claimed while it runs.
	if _, err := f.s.Claim(f.ctx, builds.Claim{Runner: builds.Runner{ID: f.runner.ID, Tags: []string{"deploy"}},
		ManagerID: f.manager, SystemID: "s_dag", TokenHash: secrettoken.Hash(secrettoken.New("glcbt-")), Now: f.tick()}); !errors.Is(err, builds.ErrNoBuild) {
		t.Fatalf("second claim of the group: %v; want ErrNoBuild", err)
	}
	res := f.finish(first, builds.StatusFailed)
	if !res.Queued {
		t.Error("the finish that freed the group reported nothing queued: long polls would not be woken")
	}
	f.expect(ps[1], builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	f.expect(ps[2], builds.PipelinePending, map[string]builds.Status{"deploy": sWaitRes})

	// A cancel of the holder's pipeline (pending: not yet claimed) frees the group too.
	if _, err := f.s.CancelPipeline(f.ctx, 1, ps[1].ID, f.tick(), "test"); err != nil {
		t.Fatal(err)
	}
	f.expect(ps[2], builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	last := f.run("deploy")
	f.finish(last, builds.StatusSuccess)
	f.expect(ps[2], builds.PipelineSuccess, map[string]builds.Status{"deploy": builds.StatusSuccess})

	// Every hand-over was recorded: waiting, then queued with the group's key.
	if n := f.events(ps[1].Builds[0].ID, builds.EventWaitingForResource); n != 1 {
		t.Errorf("pipeline 2's deploy has %d waiting_for_resource events; want 1", n)
	}
	if n := f.events(ps[2].Builds[0].ID, builds.EventQueued); n != 1 {
		t.Errorf("pipeline 3's deploy has %d queued events; want 1", n)
	}

	// A retry takes the group again: it waits while another job holds it.
	other := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "production"})
	retry, err := f.s.RetryBuild(f.ctx, first.ID, f.tick(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if retry.Status != sWaitRes {
		t.Fatalf("retry while pipeline %d holds the group: %s; want waiting_for_resource", other.ID, retry.Status)
	}
	f.finish(f.run("deploy"), builds.StatusSuccess)
	if b, err := f.s.Build(f.ctx, retry.ID); err != nil || b.Status != sPending {
		t.Fatalf("retry after the holder ended: %s, %v; want pending", b.Status, err)
	}
}

// TestResourceGroupHolderIndex: the unique index refuses a second holder whatever code
// tries it, so a bug or a race fails a transaction instead of double-booking the group.
func TestResourceGroupHolderIndex(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "production"})
	p := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "production"})
	_, err := f.pool.Exec(f.ctx, `UPDATE builds SET status = 'pending' WHERE id = $1 AND status = 'waiting_for_resource'`, p.Builds[0].ID)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "builds_resource_holder_idx" {
		t.Fatalf("a second holder: %v; want a unique violation of builds_resource_holder_idx", err)
	}
}

// TestResourceGroupProcessModes: oldest_first waits for the oldest pipeline's upcoming job
// even while it is created (GitLab's waiting_for_resource_or_upcoming), newest_first serves
// the newest pipeline first, newest_ready_first the newest waiting one; changing the mode
// assigns a free group at once.
func TestResourceGroupProcessModes(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	// Pipeline A's deploy is created (its build runs); B's and C's deploy-only pipelines wait.
	a := f.deployPipeline("env", false)
	holder := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "env"})
	b := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "env"})
	c := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "env"})
	f.expect(holder, builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	f.setMode("env", resourcegroups.ProcessOldestFirst)
	h := f.run("deploy")
	if h.PipelineID != holder.ID {
		t.Fatalf("claimed pipeline %d; want the holder %d", h.PipelineID, holder.ID)
	}
	f.finish(h, builds.StatusSuccess)
	// oldest_first: A's deploy is the first upcoming job and is only created, so the group
	// stays free and B and C keep waiting.
	f.expect(a, builds.PipelinePending, map[string]builds.Status{"build": sPending, "deploy": sCreated})
	f.expect(b, builds.PipelinePending, map[string]builds.Status{"deploy": sWaitRes})
	f.expect(c, builds.PipelinePending, map[string]builds.Status{"deploy": sWaitRes})
	upcoming, total, err := f.s.UpcomingJobs(f.ctx, 1, "env", builds.Page{Page: 1, PerPage: 20})
	if err != nil || total != 3 || upcoming[0].PipelineID != a.ID || upcoming[1].PipelineID != b.ID || upcoming[2].PipelineID != c.ID {
		t.Fatalf("upcoming jobs: %d, %v; want A's, B's, C's deploy", total, err)
	}

	// newest_first: the same rule from the newest pipeline: C's deploy waits, so it gets it.
	if !f.setMode("env", resourcegroups.ProcessNewestFirst) {
		t.Fatal("changing the mode of a free group with a job to serve queued nothing")
	}
	f.expect(c, builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	f.finish(f.run("deploy"), builds.StatusSuccess)
	f.expect(b, builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	f.finish(f.run("deploy"), builds.StatusSuccess)

	// A's build ends: its deploy is released into waiting and gets the free group at once.
	f.finish(f.run("build"), builds.StatusSuccess)
	f.expect(a, builds.PipelineRunning, map[string]builds.Status{"build": builds.StatusSuccess, "deploy": sPending})
	f.finish(f.run("deploy"), builds.StatusSuccess)

	// newest_ready_first skips created jobs: with D's deploy created and E's waiting, E's
	// goes first.
	f.setMode("env", resourcegroups.ProcessNewestReadyFirst)
	blocker := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "env"})
	e := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "env"})
	d := f.deployPipeline("env", false)
	f.expect(blocker, builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	f.finish(f.run("deploy"), builds.StatusSuccess)
	f.expect(d, builds.PipelinePending, map[string]builds.Status{"deploy": sCreated})
	f.expect(e, builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
}

// TestResourceGroupFreePass: a group left free with a job waiting (here by hand, as when
// the assignment's candidate was locked) is assigned by the due pass's
// AssignFreeResourceGroups.
func TestResourceGroupFreePass(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"deploy"}, builds.JobDefinition{Name: "deploy", Stage: "deploy", ResourceGroup: "production"})
	if _, err := f.pool.Exec(f.ctx, `UPDATE builds SET status = 'waiting_for_resource' WHERE id = $1`, p.Builds[0].ID); err != nil {
		t.Fatal(err)
	}
	n, err := f.s.AssignFreeResourceGroups(f.ctx, f.tick(), 10)
	if err != nil || n != 1 {
		t.Fatalf("AssignFreeResourceGroups = %d, %v; want 1 queued", n, err)
	}
	f.expect(p, builds.PipelinePending, map[string]builds.Status{"deploy": sPending})
	if n, err := f.s.AssignFreeResourceGroups(f.ctx, f.tick(), 10); err != nil || n != 0 {
		t.Fatalf("second pass = %d, %v; want nothing to do", n, err)
	}
}
