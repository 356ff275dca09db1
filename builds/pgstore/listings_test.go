package pgstore

import (
	"slices"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/listings"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// TestRunnerStatusRule: the status the runner listing computes and filters on in SQL is
// listings.RunnerStatus's, on both sides of each threshold; paused and tags filter too.
func TestRunnerStatusRule(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.Pool(t)
	store := New(pool)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { v := now.Add(-d); return &v }
	cases := []struct {
		created   time.Duration
		contacted *time.Time
		want      string
		paused    bool
		tags      []string
	}{
		{created: time.Hour, want: listings.RunnerNeverContacted, tags: []string{"docker"}},
		{created: 8 * 24 * time.Hour, want: listings.RunnerStale},
		{created: 30 * 24 * time.Hour, contacted: ago(time.Minute), want: listings.RunnerOnline, tags: []string{"docker", "linux"}},
		{created: 30 * 24 * time.Hour, contacted: ago(2*time.Hour - time.Second), want: listings.RunnerOnline, paused: true},
		{created: 30 * 24 * time.Hour, contacted: ago(2 * time.Hour), want: listings.RunnerOffline, tags: []string{"linux"}},
		{created: 30 * 24 * time.Hour, contacted: ago(7*24*time.Hour - time.Second), want: listings.RunnerOffline},
		{created: 30 * 24 * time.Hour, contacted: ago(7 * 24 * time.Hour), want: listings.RunnerStale, paused: true},
	}
	ids := make([]int64, len(cases))
	for i, c := range cases {
		r, err := store.CreateRunner(ctx, builds.Runner{Tags: c.tags, Paused: c.paused}, secrettoken.Hash(secrettoken.New("glrt-")))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = r.ID
		if _, err := pool.Exec(ctx, `UPDATE runners SET created_at = $2, contacted_at = $3 WHERE id = $1`, r.ID, now.Add(-c.created), c.contacted); err != nil {
			t.Fatal(err)
		}
		r.CreatedAt, r.ContactedAt = now.Add(-c.created), c.contacted
		if got := listings.RunnerStatus(r, now); got != c.want {
			t.Errorf("case %d: RunnerStatus %s, want %s", i, got, c.want)
		}
	}
	page := builds.Page{Page: 1, PerPage: 100}
	list := func(f listings.RunnerFilter) []int64 {
		t.Helper()
		f.Now = now
		got, total, err := store.RunnerListing(ctx, f, page)
		if err != nil {
			t.Fatal(err)
		}
		if total != len(got) {
			t.Errorf("%+v: total %d for %d runners", f, total, len(got))
		}
		out := make([]int64, len(got))
		for i, r := range got {
			out[i] = r.ID
			if r.Status != listings.RunnerStatus(r.Runner, now) {
				t.Errorf("runner %d: SQL says %s, RunnerStatus %s", r.ID, r.Status, listings.RunnerStatus(r.Runner, now))
			}
		}
		return out
	}
	want := func(pick func(i int) bool) []int64 {
		var out []int64
		for i, id := range ids {
			if pick(i) {
				out = append(out, id)
			}
		}
		return out
	}
	for _, st := range listings.RunnerStatuses {
		if got, w := list(listings.RunnerFilter{Status: st}), want(func(i int) bool { return cases[i].want == st }); !slices.Equal(got, w) {
			t.Errorf("status=%s: %v, want %v", st, got, w)
		}
	}
	paused := true
	if got, w := list(listings.RunnerFilter{Paused: &paused}), want(func(i int) bool { return cases[i].paused }); !slices.Equal(got, w) {
		t.Errorf("paused=true: %v, want %v", got, w)
	}
	if got, w := list(listings.RunnerFilter{Tags: []string{"linux", "docker"}}), ids[2:3]; !slices.Equal(got, w) {
		t.Errorf("tags linux,docker: %v, want %v", got, w)
	}
	if got := list(listings.RunnerFilter{}); !slices.Equal(got, ids) {
		t.Errorf("no filter: %v, want %v", got, ids)
	}
	second, total, err := store.RunnerListing(ctx, listings.RunnerFilter{Now: now}, builds.Page{Page: 2, PerPage: 3})
	if err != nil || total != len(ids) || len(second) != 3 || second[0].ID != ids[3] {
		t.Errorf("page 2 of 3: %d runners from %v, total %d (%v); want 3 from %d, total %d", len(second), second, total, err, ids[3], len(ids))
	}
	byID, err := store.RunnersByID(ctx, []int64{ids[0], ids[4], 999999}, now)
	if err != nil || len(byID) != 2 || byID[ids[4]].Status != listings.RunnerOffline {
		t.Errorf("RunnersByID: %+v (%v)", byID, err)
	}
}

// TestProjectJobsAndCommitStatuses: a project's jobs newest first, by any of several states,
// without trigger jobs or other projects'; a commit's statuses oldest first, latest attempts
// unless all, by ref name however the pipeline spelled it, stage and name.
func TestProjectJobsAndCommitStatuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := New(testenv.Pool(t))
	job := func(name, stage string) builds.JobDefinition {
		return builds.JobDefinition{Name: name, Stage: stage, Script: []string{"true"}}
	}
	const sha = "0123456789abcdef0123456789abcdef01234567"
	p1 := createPipeline(t, store, builds.PipelineDefinition{ProjectID: 41, Ref: "refs/heads/main", SHA: sha,
		Stages: []string{"build", "test"}, Jobs: []builds.JobDefinition{job("compile", "build"), job("unit", "test")}})
	p2 := createPipeline(t, store, builds.PipelineDefinition{ProjectID: 41, Ref: "feature", SHA: sha,
		Stages: []string{"build"}, Jobs: []builds.JobDefinition{job("compile", "build")}})
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 42, Ref: "main", SHA: sha,
		Stages: []string{"build"}, Jobs: []builds.JobDefinition{job("compile", "build")}})
	c := newClaimer(t, store)
	first := c.take(t) // p1's compile
	if first.PipelineID != p1.ID {
		t.Fatalf("took %d of pipeline %d, want p1's compile", first.ID, first.PipelineID)
	}
	if _, err := store.Finish(ctx, builds.Finish{BuildID: first.ID, From: []builds.Status{builds.StatusRunning},
		To: builds.StatusFailed, Reason: builds.ReasonScriptFailure, Event: builds.EventFinished, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	retry, err := store.RetryBuild(ctx, first.ID, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}

	page := builds.Page{Page: 1, PerPage: 100}
	ids := func(list []builds.Build) []int64 {
		out := make([]int64, len(list))
		for i, b := range list {
			out[i] = b.ID
		}
		return out
	}
	all, total, err := store.ProjectJobs(ctx, listings.JobFilter{ProjectID: 41}, page)
	if err != nil || total != 4 || len(all) != 4 || all[0].ID != retry.ID {
		t.Fatalf("project 41 jobs: %v total %d (%v), want 4 newest first (the retry %d first)", ids(all), total, err, retry.ID)
	}
	failed, total, err := store.ProjectJobs(ctx, listings.JobFilter{ProjectID: 41,
		Statuses: []builds.Status{builds.StatusFailed, builds.StatusSuccess}}, page)
	if err != nil || total != 1 || len(failed) != 1 || failed[0].ID != first.ID {
		t.Errorf("scope failed,success: %v total %d (%v), want [%d]", ids(failed), total, err, first.ID)
	}
	if known, err := store.ProjectKnown(ctx, 41); err != nil || !known {
		t.Errorf("project 41 (implicit, with pipelines) known: %v %v", known, err)
	}
	if known, err := store.ProjectKnown(ctx, 43); err != nil || known {
		t.Errorf("project 43 (nothing) known: %v %v", known, err)
	}

	statuses := func(f listings.CommitStatusFilter) []int64 {
		t.Helper()
		f.ProjectID, f.SHA = 41, sha
		list, total, err := store.CommitStatuses(ctx, f, page)
		if err != nil || total != len(list) {
			t.Fatalf("%+v: %v total %d (%v)", f, ids(list), total, err)
		}
		return ids(list)
	}
	unit := p1.Builds[1].ID
	if p1.Builds[1].Name != "unit" {
		t.Fatalf("p1's builds: %+v", p1.Builds)
	}
	if got, want := statuses(listings.CommitStatusFilter{}), []int64{unit, p2.Builds[0].ID, retry.ID}; !slices.Equal(got, want) {
		t.Errorf("latest statuses: %v, want %v", got, want)
	}
	if got, want := statuses(listings.CommitStatusFilter{All: true}), []int64{first.ID, unit, p2.Builds[0].ID, retry.ID}; !slices.Equal(got, want) {
		t.Errorf("all statuses: %v, want %v", got, want)
	}
	if got, want := statuses(listings.CommitStatusFilter{Ref: "main"}), []int64{unit, retry.ID}; !slices.Equal(got, want) {
		t.Errorf("ref main (stored refs/heads/main): %v, want %v", got, want)
	}
	if got, want := statuses(listings.CommitStatusFilter{Stage: "build", Name: "compile", Ref: "feature"}), []int64{p2.Builds[0].ID}; !slices.Equal(got, want) {
		t.Errorf("stage build, name compile, ref feature: %v, want %v", got, want)
	}
	app, err := store.CreateProject(ctx, builds.Project{Name: "App", Path: "app", DefaultBranch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if paths, err := store.ProjectPaths(ctx, []int64{app.ID, 41}); err != nil || len(paths) != 1 || paths[app.ID] != "app" {
		t.Errorf("ProjectPaths of a project and an implicit one: %v (%v), want only the project's path", paths, err)
	}
	summaries, err := store.PipelinesByID(ctx, []int64{p1.ID, p2.ID, 999999})
	if err != nil || len(summaries) != 2 || summaries[p2.ID].Ref != "feature" || summaries[p1.ID].SHA != sha {
		t.Errorf("PipelinesByID: %+v (%v)", summaries, err)
	}
}
