package pgstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// claimer is a runner manager that takes any untagged build, one phase.
type claimer struct {
	store *Store
	claim builds.Claim
}

func newClaimer(t *testing.T, store *Store) *claimer {
	t.Helper()
	ctx := t.Context()
	r, err := store.CreateRunner(ctx, builds.Runner{RunUntagged: true}, secrettoken.Hash(secrettoken.New("glrt-")))
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.UpsertManager(ctx, r.ID, "s_claimed", builds.ManagerInfo{}, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return &claimer{store: store, claim: builds.Claim{Runner: r, ManagerID: m.ID, SystemID: "s_claimed"}}
}

func (c *claimer) take(t *testing.T) builds.Claimed {
	t.Helper()
	cl := c.claim
	cl.TokenHash, cl.Now = secrettoken.Hash(secrettoken.New(builds.JobTokenPrefix)), time.Now()
	got, err := c.store.Claim(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (c *claimer) succeed(t *testing.T, id int64) {
	t.Helper()
	_, err := c.store.Finish(t.Context(), builds.Finish{BuildID: id, From: []builds.Status{builds.StatusRunning},
		To: builds.StatusSuccess, Event: builds.EventFinished, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
}

func createPipeline(t *testing.T, store *Store, d builds.PipelineDefinition) builds.Pipeline {
	t.Helper()
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	p, err := store.CreatePipeline(t.Context(), d, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func archive(path string) []builds.Artifacts {
	return []builds.Artifacts{{Paths: []string{path}, ArtifactType: "archive", ArtifactFormat: "zip"}}
}

// TestClaimResolvesDependencies: the claim's own statement resolves a build's dependencies
// to the latest attempt of each job in its pipeline: the stage default (earlier stages'
// jobs with artifacts), the needs default (needed jobs with artifacts: true and artifacts),
// declared names, and none; and it carries the pipeline's own fields.
func TestClaimResolvesDependencies(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	script := []string{"true"}
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 5, Ref: "main", Source: builds.SourcePush,
		BeforeSHA: "1111111111111111111111111111111111111111",
		Variables: []builds.Variable{{Key: "DEPLOY_ENV", Value: "staging"}, {Key: "CONF", Value: "a: 1", File: true}},
		Stages:    []string{"build", "test"}, Jobs: []builds.JobDefinition{
			{Name: "compile", Stage: "build", Script: script, Artifacts: archive("bin/")},
			{Name: "lint", Stage: "build", Script: script},
			{Name: "package", Stage: "build", Script: script, Artifacts: archive("dist/")},
			{Name: "unit", Stage: "test", Script: script},
			{Name: "dag", Stage: "test", Script: script, NeedsDeclared: true, Needs: []builds.Need{
				{Job: "compile", Artifacts: true}, {Job: "lint", Artifacts: true}, {Job: "package", Artifacts: false}}},
			{Name: "explicit", Stage: "test", Script: script, DependenciesDeclared: true, Dependencies: []string{"lint", "package"}},
			{Name: "none", Stage: "test", Script: script, DependenciesDeclared: true},
		}})

	ids := map[string]int64{}
	for range 3 {
		b := c.take(t)
		if b.Dependencies != nil {
			t.Errorf("%s (first stage) has dependencies %+v", b.Name, b.Dependencies)
		}
		want := builds.JobPipeline{IID: 1, Source: "push", BeforeSHA: "1111111111111111111111111111111111111111",
			CreatedAt: b.Pipeline.CreatedAt, Variables: []builds.Variable{{Key: "DEPLOY_ENV", Value: "staging"}, {Key: "CONF", Value: "a: 1", File: true}}}
		if fmt.Sprint(b.Pipeline) != fmt.Sprint(want) || b.Pipeline.CreatedAt.IsZero() {
			t.Errorf("%s: pipeline %+v, want %+v", b.Name, b.Pipeline, want)
		}
		ids[b.Name] = b.ID
	}
	// compile runs twice: its dependents get the second attempt.
	c.succeed(t, ids["compile"])
	retry, err := store.RetryBuild(t.Context(), ids["compile"], time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if again := c.take(t); again.ID != retry.ID {
		t.Fatalf("claimed %d (%s), want the retry %d", again.ID, again.Name, retry.ID)
	}
	ids["compile"] = retry.ID
	for _, name := range []string{"compile", "lint", "package"} {
		c.succeed(t, ids[name])
	}

	want := map[string][]string{
		"unit":     {"package", "compile"}, // by stage, then id: the retry is the newest build
		"dag":      {"compile"},
		"explicit": {"package"}, // lint has no artifacts: Normalize left it out
		"none":     nil,
	}
	for range len(want) {
		b := c.take(t)
		var got []string
		for _, d := range b.Dependencies {
			if d.ID != ids[d.Name] {
				t.Errorf("%s: dependency %s is build %d, want its latest attempt %d", b.Name, d.Name, d.ID, ids[d.Name])
			}
			if d.ArtifactsFile != nil {
				t.Errorf("%s: dependency %s has artifacts_file %+v before any is stored", b.Name, d.Name, d.ArtifactsFile)
			}
			got = append(got, d.Name)
		}
		w, ok := want[b.Name]
		if !ok || !slices.Equal(got, w) {
			t.Errorf("%s: dependencies %v, want %v", b.Name, got, w)
		}
		delete(want, b.Name)
	}
}

// TestPipelineIIDsNeverShared: pipelines created at once for the same projects (one with a
// projects row, one implicit) get the iids 1..n of their project, each once.
func TestPipelineIIDsNeverShared(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	ctx := context.Background()
	project, err := store.CreateProject(ctx, builds.Project{Name: "p", Path: "p", DefaultBranch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	const perProject = 12
	projects := []int64{project.ID, project.ID + 1000}
	var (
		mu   sync.Mutex
		iids = map[int64][]int64{}
		wg   sync.WaitGroup
	)
	for _, pid := range projects {
		for range perProject {
			wg.Go(func() {
				d := builds.PipelineDefinition{ProjectID: pid, Stages: []string{"test"},
					Jobs: []builds.JobDefinition{{Name: "a", Script: []string{"true"}}}}
				if err := d.Normalize(); err != nil {
					t.Error(err)
					return
				}
				p, err := store.CreatePipeline(ctx, d, time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				iids[pid] = append(iids[pid], p.IID)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for _, pid := range projects {
		got := iids[pid]
		slices.Sort(got)
		want := make([]int64, perProject)
		for i := range want {
			want[i] = int64(i + 1)
		}
		if !slices.Equal(got, want) {
			t.Errorf("project %d: iids %v, want %v", pid, got, want)
		}
	}
	p := createPipeline(t, store, builds.PipelineDefinition{ProjectID: projects[1], Stages: []string{"test"},
		Jobs: []builds.JobDefinition{{Name: "a", Script: []string{"true"}}}})
	if p.IID != perProject+1 || p.Source != builds.SourceAPI || p.BeforeSHA != builds.ZeroSHA || p.Variables == nil {
		t.Errorf("next pipeline: iid %d source %q before_sha %q variables %v; want %d, api, zeros, []",
			p.IID, p.Source, p.BeforeSHA, p.Variables, perProject+1)
	}
}

// TestClaimByDeletedRunner: a runner deleted between its request's authentication and the
// claim gets ErrRunnerForbidden (a 403, as for any revoked token), not a foreign-key error
// (a 500), and the build stays pending for other runners.
func TestClaimByDeletedRunner(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	p := createPipeline(t, store, builds.PipelineDefinition{ProjectID: 3, Stages: []string{"test"},
		Jobs: []builds.JobDefinition{{Name: "unit", Stage: "test", Script: []string{"true"}}}})
	if _, err := store.pool.Exec(t.Context(), `DELETE FROM runners WHERE id = $1`, c.claim.Runner.ID); err != nil {
		t.Fatal(err)
	}
	for _, twoPhase := range []bool{false, true} {
		cl := c.claim
		cl.TokenHash, cl.Now = secrettoken.Hash(secrettoken.New(builds.JobTokenPrefix)), time.Now()
		if twoPhase {
			cl.TwoPhase = func(int64) bool { return true }
			cl.AckDeadline = cl.Now.Add(time.Minute)
		}
		_, err := store.Claim(t.Context(), cl)
		if !errors.Is(err, builds.ErrRunnerForbidden) {
			t.Errorf("two-phase %v: claim by a deleted runner: %v, want ErrRunnerForbidden", twoPhase, err)
		}
	}
	got, err := store.Pipeline(t.Context(), 3, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Builds[0].Status; st != builds.StatusPending {
		t.Errorf("build is %s after the refused claims, want pending", st)
	}
}

// TestClaimReadsProject: the claim's statement returns the build's project and its
// variables as JobProject reads them, and an empty JobProject for an implicit project (no
// row), so that the service reads neither again.
func TestClaimReadsProject(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	p, err := store.CreateProject(ctx, builds.Project{Name: "claimed", Path: "claimed", RepoURL: "https://example.com/claimed.git",
		DefaultBranch: "main", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []builds.ProjectVariable{
		{Key: "B_SECRET", Value: "hunter2hunter2", Masked: true, Protected: true, VariableType: builds.VariableEnv},
		{Key: "A_FILE", Value: "a: 1", VariableType: builds.VariableFile},
	} {
		if err := store.CreateProjectVariable(ctx, p.ID, v); err != nil {
			t.Fatal(err)
		}
	}
	want, err := store.JobProject(ctx, p.ID)
	if err != nil || want.Project == nil || len(want.Variables) != 2 {
		t.Fatalf("JobProject = %+v, %v", want, err)
	}
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: p.ID, Stages: []string{"test"},
		Jobs: []builds.JobDefinition{{Name: "stored", Stage: "test", Script: []string{"true"}}}})
	got := c.take(t)
	// The claim does not read the protected names: its build carries the decision.
	want.Protected = builds.ProtectedRefNames{}
	if got.Project == nil || !reflect.DeepEqual(*got.Project, want) {
		t.Errorf("claim of a stored project's build: project %+v, want %+v", got.Project, want)
	}

	createPipeline(t, store, builds.PipelineDefinition{ProjectID: p.ID + 1000, Stages: []string{"test"},
		Jobs: []builds.JobDefinition{{Name: "implicit", Stage: "test", Script: []string{"true"}}}})
	got = c.take(t)
	if got.Project == nil || got.Project.Project != nil || len(got.Project.Variables) != 0 {
		t.Errorf("claim of an implicit project's build: project %+v, want an empty one", got.Project)
	}
}
