package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// dagFixture is a store on a database of its own with one runner; each job of its
// pipelines carries its own name as a tag, so that a test claims exactly the job it means.
type dagFixture struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	s       *Store
	runner  builds.Runner
	manager int64
	now     time.Time
}

func newDAGFixture(t *testing.T) *dagFixture {
	t.Helper()
	pool := testenv.Pool(t)
	f := &dagFixture{t: t, ctx: t.Context(), pool: pool, s: New(pool), now: time.Now().UTC().Truncate(time.Microsecond)}
	r, err := f.s.CreateRunner(f.ctx, builds.Runner{RunUntagged: true}, secrettoken.Hash(secrettoken.New("glrt-")))
	if err != nil {
		t.Fatal(err)
	}
	f.runner = r
	m, err := f.s.UpsertManager(f.ctx, r.ID, "s_dag", builds.ManagerInfo{}, f.now, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.manager = m.ID
	return f
}

// tick moves the fixture's clock: every change gets a time of its own.
func (f *dagFixture) tick() time.Time {
	f.now = f.now.Add(time.Second)
	return f.now
}

// create stores a pipeline of these jobs (each tagged with its name).
func (f *dagFixture) create(strategy string, stages []string, jobs ...builds.JobDefinition) builds.Pipeline {
	f.t.Helper()
	for i := range jobs {
		jobs[i].Tags = []string{jobs[i].Name}
		if len(jobs[i].Script) == 0 {
			jobs[i].Script = []string{"true"}
		}
	}
	d := builds.PipelineDefinition{ProjectID: 1, Stages: stages, TimeoutStrategy: strategy, Jobs: jobs}
	if err := d.Normalize(); err != nil {
		f.t.Fatal(err)
	}
	p, err := f.s.CreatePipeline(f.ctx, d, f.tick())
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// latest reads the pipeline and returns the latest attempt of each job by name.
func (f *dagFixture) latest(p builds.Pipeline) (string, map[string]builds.Build) {
	f.t.Helper()
	got, err := f.s.Pipeline(f.ctx, p.ProjectID, p.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]builds.Build{}
	for _, b := range got.Builds {
		if b.RetriedBy == 0 {
			out[b.Name] = b
		}
	}
	return got.Status, out
}

// expect checks the pipeline's status and the status of every named job.
func (f *dagFixture) expect(p builds.Pipeline, status string, want map[string]builds.Status) map[string]builds.Build {
	f.t.Helper()
	st, jobs := f.latest(p)
	got := map[string]builds.Status{}
	for name := range want {
		got[name] = jobs[name].Status
	}
	if st != status || !maps.Equal(got, want) {
		f.t.Fatalf("pipeline %s with jobs %v; want %s with %v", st, got, status, want)
	}
	return jobs
}

// run claims the named job (it must be pending) and returns it running.
func (f *dagFixture) run(name string) builds.Build {
	f.t.Helper()
	b, err := f.s.Claim(f.ctx, builds.Claim{Runner: builds.Runner{ID: f.runner.ID, Tags: []string{name}},
		ManagerID: f.manager, SystemID: "s_dag", TokenHash: secrettoken.Hash(secrettoken.New("glcbt-")), Now: f.tick()})
	if err != nil || b.Name != name {
		f.t.Fatalf("claim %s: got %q, %v", name, b.Name, err)
	}
	return b.Build
}

// finish ends a running build as a runner's final update does.
func (f *dagFixture) finish(b builds.Build, to builds.Status, exitCode ...int64) builds.Finished {
	f.t.Helper()
	fin := builds.Finish{BuildID: b.ID, From: []builds.Status{builds.StatusRunning}, To: to, Event: builds.EventFinished, Now: f.tick()}
	if to == builds.StatusFailed {
		fin.Reason = builds.ReasonScriptFailure
	}
	if len(exitCode) > 0 {
		fin.ExitCode = &exitCode[0]
	}
	res, err := f.s.Finish(f.ctx, fin)
	if err != nil {
		f.t.Fatalf("finish %s: %v", b.Name, err)
	}
	return res
}

// complete runs the named jobs one after the other and ends each in to.
func (f *dagFixture) complete(to builds.Status, names ...string) {
	f.t.Helper()
	for _, n := range names {
		f.finish(f.run(n), to)
	}
}

func (f *dagFixture) events(id int64, typ string) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM build_events WHERE build_id = $1 AND type = $2`, id, typ).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func dag(names ...string) (needs []builds.Need) {
	for _, n := range names {
		needs = append(needs, builds.Need{Job: n, Artifacts: true})
	}
	return needs
}

type statuses = map[string]builds.Status

const (
	sCreated   = builds.StatusCreated
	sPending   = builds.StatusPending
	sRunning   = builds.StatusRunning
	sSuccess   = builds.StatusSuccess
	sFailed    = builds.StatusFailed
	sCanceled  = builds.StatusCanceled
	sSkipped   = builds.StatusSkipped
	sManual    = builds.StatusManual
	sScheduled = builds.StatusScheduled
)

// TestDAGPipelineAdvancesByNeeds: a job of a late stage that needs an early one starts as
// soon as that one succeeded, while the stages between still run; needs: [] starts at
// creation; jobs without needs keep stage order and wait for the DAG jobs of earlier
// stages too.
func TestDAGPipelineAdvancesByNeeds(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"build", "test", "deploy"},
		builds.JobDefinition{Name: "compile", Stage: "build"},
		builds.JobDefinition{Name: "lint", Stage: "build"},
		builds.JobDefinition{Name: "unit", Stage: "test"},
		builds.JobDefinition{Name: "package", Stage: "deploy", NeedsDeclared: true, Needs: dag("compile")},
		builds.JobDefinition{Name: "docs", Stage: "deploy", NeedsDeclared: true},
		builds.JobDefinition{Name: "ship", Stage: "deploy"})
	var perJob bool
	if err := f.pool.QueryRow(f.ctx, `SELECT per_job FROM pipelines WHERE id = $1`, p.ID).Scan(&perJob); err != nil || !perJob {
		t.Fatalf("per_job %t (%v): a pipeline with needs is planned per job", perJob, err)
	}
	f.expect(p, builds.PipelinePending, statuses{"compile": sPending, "lint": sPending, "unit": sCreated,
		"package": sCreated, "docs": sPending, "ship": sCreated})

	f.complete(sSuccess, "compile")
	f.expect(p, builds.PipelineRunning, statuses{"lint": sPending, "unit": sCreated, "package": sPending, "ship": sCreated})
	f.complete(sSuccess, "package", "docs")
	f.expect(p, builds.PipelineRunning, statuses{"lint": sPending, "unit": sCreated, "ship": sCreated})
	f.complete(sSuccess, "lint")
	f.expect(p, builds.PipelineRunning, statuses{"unit": sPending, "ship": sCreated})
	f.complete(sSuccess, "unit")
	f.expect(p, builds.PipelineRunning, statuses{"ship": sPending})
	f.complete(sSuccess, "ship")
	jobs := f.expect(p, builds.PipelineSuccess, statuses{"ship": sSuccess})
	if n := f.events(jobs["package"].ID, builds.EventQueued); n != 1 {
		t.Errorf("package has %d queued events, want 1", n)
	}
}

// TestDAGFailurePropagation: a blocking failure skips what needs it (transitively, in one
// advance) and the later stages' on_success jobs, runs on_failure and always jobs, and
// leaves DAG jobs that do not depend on it alone; the pipeline fails. A retry reopens what
// it skipped.
func TestDAGFailurePropagation(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"build", "test", "deploy"},
		builds.JobDefinition{Name: "compile", Stage: "build"},
		builds.JobDefinition{Name: "lint", Stage: "build"},
		builds.JobDefinition{Name: "unit", Stage: "test", NeedsDeclared: true, Needs: dag("compile")},
		builds.JobDefinition{Name: "style", Stage: "test", NeedsDeclared: true, Needs: dag("lint")},
		builds.JobDefinition{Name: "integration", Stage: "deploy", NeedsDeclared: true, Needs: dag("unit")},
		builds.JobDefinition{Name: "report", Stage: "deploy", NeedsDeclared: true, Needs: dag("unit"), When: builds.WhenAlways},
		builds.JobDefinition{Name: "rollback", Stage: "deploy", When: builds.WhenOnFailure},
		builds.JobDefinition{Name: "ship", Stage: "deploy"})
	f.complete(sFailed, "compile")
	f.expect(p, builds.PipelineRunning, statuses{"unit": sSkipped, "integration": sSkipped, "report": sPending,
		"style": sCreated, "rollback": sCreated, "ship": sCreated})
	f.complete(sSuccess, "lint", "style", "report")
	f.expect(p, builds.PipelineRunning, statuses{"rollback": sPending, "ship": sSkipped})
	jobs := f.expect(p, builds.PipelineRunning, statuses{"rollback": sPending, "ship": sSkipped})
	f.complete(sSuccess, "rollback")
	f.expect(p, builds.PipelineFailed, statuses{"rollback": sSuccess, "ship": sSkipped})

	// An operator retry of compile reopens what was skipped downstream of it (its DAG chain
	// and the later stages' jobs), and the pipeline runs to success.
	if _, err := f.s.RetryBuild(f.ctx, jobs["compile"].ID, f.tick(), "op"); err != nil {
		t.Fatal(err)
	}
	jobs = f.expect(p, builds.PipelineRunning, statuses{"compile": sPending, "unit": sCreated, "integration": sCreated,
		"ship": sCreated, "report": sSuccess, "rollback": sSuccess, "style": sSuccess})
	for _, name := range []string{"unit", "integration", "ship"} {
		if n := f.events(jobs[name].ID, builds.EventReopened); n != 1 {
			t.Errorf("%s has %d reopened events, want 1", name, n)
		}
	}
	f.complete(sSuccess, "compile", "unit")
	f.expect(p, builds.PipelineRunning, statuses{"integration": sPending, "ship": sPending})
	f.complete(sSuccess, "integration", "ship")
	f.expect(p, builds.PipelineSuccess, nil)
}

// TestAllowFailureExitCodes: a failure whose exit code the job lists is allowed (the build's
// allow_failure is set at finish) and does not hold what needs it; another exit code blocks;
// a retry of the allowed failure starts with the definition's allow_failure again.
func TestAllowFailureExitCodes(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"test", "deploy"},
		builds.JobDefinition{Name: "flaky", Stage: "test", AllowFailureExitCodes: []int{3, 137}},
		builds.JobDefinition{Name: "strict", Stage: "test", AllowFailureExitCodes: []int{3}},
		builds.JobDefinition{Name: "ship", Stage: "deploy"})
	flaky := f.finish(f.run("flaky"), sFailed, 137).Build
	if !flaky.AllowFailure {
		t.Fatal("flaky failed with exit code 137, which it lists, yet allow_failure is false")
	}
	f.expect(p, builds.PipelineRunning, statuses{"ship": sCreated})
	strict := f.finish(f.run("strict"), sFailed, 4).Build
	if strict.AllowFailure {
		t.Fatal("strict failed with exit code 4, which it does not list, yet allow_failure is true")
	}
	f.expect(p, builds.PipelineFailed, statuses{"ship": sSkipped})
	retry, err := f.s.RetryBuild(f.ctx, flaky.ID, f.tick(), "test")
	if err != nil || retry.AllowFailure {
		t.Fatalf("retry of flaky: allow_failure %t, %v; want the definition's false", retry.AllowFailure, err)
	}
	// Strict's retry succeeds, flaky's fails with a listed code again: the pipeline succeeds.
	if _, err := f.s.RetryBuild(f.ctx, strict.ID, f.tick(), "test"); err != nil {
		t.Fatal(err)
	}
	f.finish(f.run("strict"), sSuccess)
	f.finish(f.run("flaky"), sFailed, 3)
	f.expect(p, builds.PipelineRunning, statuses{"ship": sPending, "strict": sSuccess})
	f.complete(sSuccess, "ship")
	f.expect(p, builds.PipelineSuccess, statuses{"flaky": sFailed})
}

// TestManualJobs: a manual job waits in manual until played; an optional one (allow_failure)
// holds nothing and the pipeline succeeds with it never played, with no job left for a
// waiter; a blocking one holds the later stages and the pipeline in status manual, which the
// stuck check leaves alone; play of anything else is refused.
func TestManualJobs(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"build", "deploy", "verify"},
		builds.JobDefinition{Name: "compile", Stage: "build"},
		builds.JobDefinition{Name: "preview", Stage: "build", When: builds.WhenManual, AllowFailure: true},
		builds.JobDefinition{Name: "deploy", Stage: "deploy", When: builds.WhenManual},
		builds.JobDefinition{Name: "smoke", Stage: "verify"})
	f.expect(p, builds.PipelinePending, statuses{"compile": sPending, "preview": sManual, "deploy": sCreated, "smoke": sCreated})
	f.complete(sSuccess, "compile")
	jobs := f.expect(p, builds.PipelineManual, statuses{"preview": sManual, "deploy": sManual, "smoke": sCreated})
	if n := f.events(jobs["deploy"].ID, builds.EventManual); n != 1 {
		t.Errorf("deploy has %d manual events, want 1", n)
	}
	res, err := f.s.HandleStuckStages(f.ctx, builds.StuckParams{Now: f.now.Add(48 * time.Hour), Timeout: time.Hour, Batch: 10})
	if err != nil || res.Checked != 0 {
		t.Fatalf("stuck check of a pipeline blocked on a manual job: %+v, %v; want it not even a candidate", res, err)
	}
	if _, err := f.s.PlayBuild(f.ctx, jobs["smoke"].ID, f.tick(), "op"); !errors.Is(err, builds.ErrConflict) {
		t.Fatalf("play of a created job: %v, want ErrConflict", err)
	}
	played, err := f.s.PlayBuild(f.ctx, jobs["deploy"].ID, f.tick(), "op")
	if err != nil || played.Status != sPending {
		t.Fatalf("play deploy: %s, %v", played.Status, err)
	}
	if n := f.events(played.ID, builds.EventPlayed); n != 1 {
		t.Errorf("deploy has %d played events, want 1", n)
	}
	f.expect(p, builds.PipelineRunning, statuses{"deploy": sPending, "smoke": sCreated})
	f.complete(sSuccess, "deploy", "smoke")
	f.expect(p, builds.PipelineSuccess, statuses{"preview": sManual, "smoke": sSuccess})
	prog, err := f.s.PipelineProgress(f.ctx, p.ProjectID, p.ID)
	if err != nil || prog.Remaining != 0 || prog.Status != builds.PipelineSuccess {
		t.Fatalf("progress %+v, %v: the optional manual job is not remaining", prog, err)
	}
	// Played after the end, the optional job reopens the pipeline, which ends again.
	if _, err := f.s.PlayBuild(f.ctx, jobs["preview"].ID, f.tick(), "op"); err != nil {
		t.Fatal(err)
	}
	f.expect(p, builds.PipelineRunning, statuses{"preview": sPending})
	f.complete(sSuccess, "preview")
	f.expect(p, builds.PipelineSuccess, statuses{"preview": sSuccess})
}

// TestPlayReopensDAGDependents: a DAG job that needs an optional manual job is skipped while
// that job is not played (GitLab); playing it gives the skipped job another chance.
func TestPlayReopensDAGDependents(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"deploy", "verify"},
		builds.JobDefinition{Name: "deploy", Stage: "deploy", When: builds.WhenManual, AllowFailure: true},
		builds.JobDefinition{Name: "smoke", Stage: "verify", NeedsDeclared: true, Needs: dag("deploy")},
		builds.JobDefinition{Name: "notes", Stage: "verify"})
	jobs := f.expect(p, builds.PipelinePending, statuses{"deploy": sManual, "smoke": sSkipped, "notes": sPending})
	f.complete(sSuccess, "notes")
	f.expect(p, builds.PipelineSuccess, statuses{"smoke": sSkipped})
	if _, err := f.s.PlayBuild(f.ctx, jobs["deploy"].ID, f.tick(), "op"); err != nil {
		t.Fatal(err)
	}
	jobs = f.expect(p, builds.PipelineRunning, statuses{"deploy": sPending, "smoke": sCreated, "notes": sSuccess})
	if n := f.events(jobs["smoke"].ID, builds.EventReopened); n != 1 {
		t.Errorf("smoke has %d reopened events, want 1", n)
	}
	f.complete(sSuccess, "deploy")
	f.expect(p, builds.PipelineRunning, statuses{"smoke": sPending})
	f.complete(sSuccess, "smoke")
	f.expect(p, builds.PipelineSuccess, statuses{"smoke": sSuccess})
}

// TestDelayedJobs: a delayed job is scheduled with its scheduled_at in Postgres once its
// predecessors allow, becomes pending when the due pass finds its time passed (not before),
// and the pipeline goes scheduled → running; a cancel ends a scheduled or manual job.
func TestDelayedJobs(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	p := f.create("", []string{"build", "deploy", "verify"},
		builds.JobDefinition{Name: "compile", Stage: "build"},
		builds.JobDefinition{Name: "rollout", Stage: "deploy", When: builds.WhenDelayed, StartInSeconds: 600},
		builds.JobDefinition{Name: "smoke", Stage: "verify"})
	f.complete(sSuccess, "compile")
	jobs := f.expect(p, builds.PipelineScheduled, statuses{"rollout": sScheduled, "smoke": sCreated})
	at := jobs["rollout"].ScheduledAt
	if at == nil || !at.Equal(f.now.Add(10*time.Minute)) {
		t.Fatalf("rollout scheduled at %v, want finish time + 600 s (%v)", at, f.now.Add(10*time.Minute))
	}
	if res, err := f.s.EnqueueDue(f.ctx, at.Add(-time.Second), 10); err != nil || res.Enqueued != 0 {
		t.Fatalf("due pass a second early: %+v, %v", res, err)
	}
	res, err := f.s.EnqueueDue(f.ctx, *at, 10)
	if err != nil || res.Enqueued != 1 || len(res.Pipelines) != 1 || res.Pipelines[0] != p.ID {
		t.Fatalf("due pass on time: %+v, %v", res, err)
	}
	f.expect(p, builds.PipelineRunning, statuses{"rollout": sPending, "smoke": sCreated})
	f.complete(sSuccess, "rollout", "smoke")
	f.expect(p, builds.PipelineSuccess, nil)

	// A pipeline cancel ends scheduled and manual jobs too.
	q := f.create("", []string{"deploy"},
		builds.JobDefinition{Name: "later", Stage: "deploy", When: builds.WhenDelayed, StartInSeconds: 60},
		builds.JobDefinition{Name: "gate", Stage: "deploy", When: builds.WhenManual})
	f.expect(q, builds.PipelineManual, statuses{"later": sScheduled, "gate": sManual})
	if _, err := f.s.CancelPipeline(f.ctx, q.ProjectID, q.ID, f.tick(), "test"); err != nil {
		t.Fatal(err)
	}
	f.expect(q, builds.PipelineCanceled, statuses{"later": sCanceled, "gate": sCanceled})
}

// TestDependentReleasedOnceUnderConcurrentFinishes: two stores (two replicas' pools) finish
// the two jobs a third one needs at the same moment; the pipeline row lock serialises the
// advances and the dependent is released exactly once.
func TestDependentReleasedOnceUnderConcurrentFinishes(t *testing.T) {
	t.Parallel()
	f := newDAGFixture(t)
	pool, err := pgxpool.New(f.ctx, f.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	other := New(pool)
	for round := 0; round < 10; round++ {
		p := f.create("", []string{"build", "deploy"},
			builds.JobDefinition{Name: "a", Stage: "build"},
			builds.JobDefinition{Name: "b", Stage: "build"},
			builds.JobDefinition{Name: "c", Stage: "deploy", NeedsDeclared: true, Needs: dag("a", "b")})
		a, b := f.run("a"), f.run("b")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, pair := range []struct {
			s *Store
			b builds.Build
		}{{f.s, a}, {other, b}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = pair.s.Finish(f.ctx, builds.Finish{BuildID: pair.b.ID, From: []builds.Status{sRunning},
					To: sSuccess, Event: builds.EventFinished, Now: f.now})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		jobs := f.expect(p, builds.PipelineRunning, statuses{"a": sSuccess, "b": sSuccess, "c": sPending})
		if n := f.events(jobs["c"].ID, builds.EventQueued); n != 1 {
			t.Fatalf("round %d: c has %d queued events, want exactly 1", round, n)
		}
		f.complete(sSuccess, "c")
	}
}

// TestStuckCheckInDAGPipelines: in a pipeline planned per job the check waits for every
// build on its way to or on a runner, whatever its stage, never for manual or scheduled
// ones. Pessimistic fails them all; optimistic leaves them behind, and what needs them runs.
func TestStuckCheckInDAGPipelines(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{builds.TimeoutPessimistic, builds.TimeoutOptimistic} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			f := newDAGFixture(t)
			p := f.create(strategy, []string{"build", "test", "deploy"},
				builds.JobDefinition{Name: "compile", Stage: "build"},
				builds.JobDefinition{Name: "hang", Stage: "build", NeedsDeclared: true},
				builds.JobDefinition{Name: "docs", Stage: "test", NeedsDeclared: true, Needs: dag("compile")},
				builds.JobDefinition{Name: "gate", Stage: "test", NeedsDeclared: true, When: builds.WhenManual},
				builds.JobDefinition{Name: "later", Stage: "test", NeedsDeclared: true, When: builds.WhenDelayed, StartInSeconds: 7 * 24 * 3600},
				builds.JobDefinition{Name: "after", Stage: "deploy", NeedsDeclared: true, Needs: dag("docs", "hang")},
				builds.JobDefinition{Name: "ship", Stage: "deploy", NeedsDeclared: true, Needs: dag("gate")})
			f.complete(sSuccess, "compile")
			// hang is pending from the start (needs: []); docs of the next stage runs too.
			hang, docs := f.run("hang"), f.run("docs")
			f.expect(p, builds.PipelineRunning, statuses{"gate": sManual, "later": sScheduled, "after": sCreated})

			res, err := f.s.HandleStuckStages(f.ctx, builds.StuckParams{Now: f.now.Add(30 * time.Minute), Timeout: time.Hour, Batch: 10})
			if err != nil || len(res.Stuck) != 0 {
				t.Fatalf("check before the timeout: %+v, %v", res, err)
			}
			res, err = f.s.HandleStuckStages(f.ctx, builds.StuckParams{Now: f.now.Add(2 * time.Hour), Timeout: time.Hour, Batch: 10})
			if err != nil || len(res.Stuck) != 1 {
				t.Fatalf("check after the timeout: %+v, %v", res, err)
			}
			stuck := res.Stuck[0]
			if len(stuck.Builds) != 2 || stuck.Builds[0].ID != hang.ID || stuck.Builds[1].ID != docs.ID || stuck.Stage != "build, test" {
				t.Fatalf("stuck check waited for %+v in %q; want hang and docs, of stages build and test", stuck.Builds, stuck.Stage)
			}
			if strategy == builds.TimeoutPessimistic {
				// Blocked on gate, as GitLab says of a pipeline with a failure and a manual job
				// nobody played: status manual, not failed yet.
				f.expect(p, builds.PipelineManual, statuses{"hang": sFailed, "docs": sFailed, "after": sSkipped,
					"gate": sManual, "later": sScheduled, "ship": sCreated})
				return
			}
			// Optimistic: what needed the stuck builds runs; they are left to the reapers.
			f.expect(p, builds.PipelineRunning, statuses{"hang": sRunning, "docs": sRunning, "after": sPending})
			res, err = f.s.HandleStuckStages(f.ctx, builds.StuckParams{Now: f.now.Add(4 * time.Hour), Timeout: time.Hour, Batch: 10})
			if err != nil || len(res.Stuck) != 1 || len(res.Stuck[0].Builds) != 1 || res.Stuck[0].Builds[0].Name != "after" {
				t.Fatalf("second check: %+v, %v; want only after, the others left behind", res, err)
			}
		})
	}
}

// BenchmarkFinishInLargePipeline: a claim and a final update in a pipeline of 200 or 2,000
// jobs (10 stages of 20 or 200), planned by stage (every job on_success without needs) or
// per job (half of them with needs). Each finish locks the pipeline and advances it: the
// stage tally counts by group; per job, the same count and the ended job's needers
// (advanceNeeders), the whole plan only when a stage's last job ends.
func BenchmarkFinishInLargePipeline(b *testing.B) {
	for _, size := range []int{200, 2000} {
		for _, perJob := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/%d", map[bool]string{false: "stages", true: "per_job"}[perJob], size), func(b *testing.B) {
				finishInLargePipeline(b, perJob, size/10)
			})
		}
	}
}

func finishInLargePipeline(b *testing.B, perJob bool, perStage int) {
	ctx := b.Context()
	pool := testenv.Pool(b)
	s := New(pool)
	r, err := s.CreateRunner(ctx, builds.Runner{RunUntagged: true}, secrettoken.Hash(secrettoken.New("glrt-")))
	if err != nil {
		b.Fatal(err)
	}
	m, err := s.UpsertManager(ctx, r.ID, "s_bench", builds.ManagerInfo{}, time.Now(), 0)
	if err != nil {
		b.Fatal(err)
	}
	create := func() {
		d := builds.PipelineDefinition{ProjectID: 1}
		for st := 0; st < 10; st++ {
			d.Stages = append(d.Stages, fmt.Sprintf("s%d", st))
			for k := 0; k < perStage; k++ {
				j := builds.JobDefinition{Name: fmt.Sprintf("s%dj%d", st, k), Stage: d.Stages[st], Script: []string{"x"}}
				if perJob && st > 0 && k%2 == 0 {
					j.NeedsDeclared, j.Needs = true, dag(fmt.Sprintf("s%dj%d", st-1, k), fmt.Sprintf("s%dj%d", st-1, k+1))
				}
				d.Jobs = append(d.Jobs, j)
			}
		}
		if err := d.Normalize(); err != nil {
			b.Fatal(err)
		}
		if _, err := s.CreatePipeline(ctx, d, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	create()
	cpu := func() (goCPU, pgCPU time.Duration) { return processCPU(b), backendsCPU(b, pool) }
	go0, pg0 := cpu()
	for b.Loop() {
		bl, err := s.Claim(ctx, builds.Claim{Runner: r, ManagerID: m.ID, SystemID: "s_bench",
			TokenHash: secrettoken.Hash(secrettoken.New("glcbt-")), Now: time.Now()})
		if errors.Is(err, builds.ErrNoBuild) {
			create()
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Finish(ctx, builds.Finish{BuildID: bl.ID, From: []builds.Status{sRunning}, To: sSuccess,
			Event: builds.EventFinished, Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	// CPU rather than time: on a shared, loaded machine the wall clock mostly measures
	// the others.
	go1, pg1 := cpu()
	b.ReportMetric(float64((go1-go0).Microseconds())/float64(b.N), "go-cpu-µs/op")
	b.ReportMetric(float64((pg1-pg0).Microseconds())/float64(b.N), "pg-cpu-µs/op")
}

// processCPU is this process's CPU time (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendsCPU is the CPU time of the Postgres backends serving pool's database, from
// /proc (Postgres on this machine, as testenv runs it).
func backendsCPU(b *testing.B, pool *pgxpool.Pool) time.Duration {
	rows, err := pool.Query(b.Context(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Skipf("Postgres backends' CPU unreadable: %v", err)
		}
		// Fields after the command's closing parenthesis; utime and stime are the 14th
		// and 15th of the line.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		for _, k := range []int{11, 12} {
			n, err := strconv.ParseInt(f[k], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// TestFinishLeavesTheWholePlanNothingToDo: a finish in a pipeline planned per job decides
// only the ended job's needers (advanceNeeders), or the whole plan when it must; either
// way, after every finish the whole plan over every latest attempt finds nothing to move,
// and the stored status is the one derived from them. Random DAGs of every when, allowed
// failures and failures, finished in a random order; and the same for builds without
// needed_by (created before the column), which take the whole plan every time.
func TestFinishLeavesTheWholePlanNothingToDo(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		for _, unknown := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed%d/needers_unknown=%t", seed, unknown), func(t *testing.T) {
				t.Parallel()
				finishRandomDAG(t, seed, unknown)
			})
		}
	}
}

func finishRandomDAG(t *testing.T, seed uint64, unknown bool) {
	f := newDAGFixture(t)
	rng := rand.New(rand.NewPCG(seed, 30))
	stages := []string{"s0", "s1", "s2", "s3", "s4"}
	whens := []string{"", "", "", "", builds.WhenAlways, builds.WhenOnFailure, builds.WhenManual}
	var jobs []builds.JobDefinition
	for i := range 40 {
		st := min(i/8, 4)
		j := builds.JobDefinition{Name: fmt.Sprintf("j%d", i), Stage: stages[st], When: whens[rng.IntN(len(whens))],
			AllowFailure: rng.IntN(4) == 0}
		if i >= 4 && rng.IntN(3) > 0 {
			j.NeedsDeclared = true
			for range 1 + rng.IntN(3) {
				j.Needs = append(j.Needs, dag(fmt.Sprintf("j%d", rng.IntN(min(i, (st+1)*8))))...)
			}
			j.Needs = slices.CompactFunc(j.Needs, func(a, b builds.Need) bool { return a.Job == b.Job })
			j.Needs = slices.DeleteFunc(j.Needs, func(n builds.Need) bool { return n.Job == j.Name })
		}
		jobs = append(jobs, j)
	}
	p := f.create("", stages, jobs...)
	if unknown {
		if _, err := f.pool.Exec(f.ctx, `UPDATE builds SET needed_by = NULL WHERE pipeline_id = $1`, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; ; step++ {
		var pending []string
		rows, err := f.pool.Query(f.ctx, `SELECT name FROM builds WHERE pipeline_id = $1 AND status = 'pending' ORDER BY id`, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if pending, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(pending) == 0 {
			break
		}
		to := []builds.Status{sSuccess, sSuccess, sSuccess, sFailed}[rng.IntN(4)]
		f.finish(f.run(pending[rng.IntN(len(pending))]), to)

		var all []builds.PlanJob
		var stored string
		if err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			var err error
			if all, err = readJobs(f.ctx, tx, p.ID); err != nil {
				return err
			}
			return tx.QueryRow(f.ctx, `SELECT status FROM pipelines WHERE id = $1`, p.ID).Scan(&stored)
		}); err != nil {
			t.Fatal(err)
		}
		if moves := builds.PlanJobs(all); len(moves) > 0 {
			t.Fatalf("step %d: the whole plan still moves %v of %+v", step, moves, all)
		}
		if want := builds.PipelineStatus(builds.TallyJobs(all)); stored != want {
			t.Fatalf("step %d: pipeline %s, want %s from its jobs", step, stored, want)
		}
	}
}
