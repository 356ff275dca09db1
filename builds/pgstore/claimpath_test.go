package pgstore

import (
	"reflect"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// claimed is a claim's answer and the build's run deadline.
type claimed struct {
	builds.Claimed
	runDeadline *time.Time
}

// TestClaimPathsAgree: the one-statement claim with two-phase decided before it
// (Claim.WaitForAck, the flag's answer for every project) and the transaction that asks
// Claim.TwoPhase for the locked candidate's project assign a build alike, two-phase and
// legacy: the same build row and payload inputs returned, the same 'assigned' event, the
// same pipeline start, and the same row when read back.
func TestClaimPathsAgree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	p, err := store.CreateProject(ctx, builds.Project{Name: "paths", Path: "paths", RepoURL: "https://example.com/paths.git",
		DefaultBranch: "main", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateProjectVariable(ctx, p.ID, builds.ProjectVariable{Key: "TOKEN", Value: "s3cr3t-s3cr3t",
		Masked: true, VariableType: builds.VariableEnv}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Microsecond) // Postgres's precision: the rows compare equal
	deadline := now.Add(2 * time.Minute)

	// claim creates a pipeline of one job and claims it, on the per-candidate path or with
	// the decision made before the claim.
	claim := func(t *testing.T, twoPhase, perCandidate bool) (claimed, []builds.Event, builds.Pipeline) {
		t.Helper()
		pl := createPipeline(t, store, builds.PipelineDefinition{ProjectID: p.ID, Stages: []string{"test"},
			Variables: []builds.Variable{{Key: "PIPELINE_VAR", Value: "v"}},
			Jobs: []builds.JobDefinition{{Name: "unit", Stage: "test", Script: []string{"make test"}, TimeoutSeconds: 600,
				Variables: []builds.Variable{{Key: "JOB_VAR", Value: "j"}}}}})
		cl := c.claim
		cl.TokenHash, cl.Now, cl.AckDeadline = secrettoken.Hash(secrettoken.New(builds.JobTokenPrefix)), now, deadline
		asked := 0
		if perCandidate {
			cl.TwoPhase = func(projectID int64) bool {
				asked++
				if projectID != p.ID {
					t.Errorf("TwoPhase asked for project %d, want %d", projectID, p.ID)
				}
				return twoPhase
			}
		} else {
			cl.WaitForAck = twoPhase
		}
		got, err := store.Claim(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if perCandidate && asked != 1 {
			t.Errorf("TwoPhase asked %d times, want once", asked)
		}
		if got.PipelineID != pl.ID || string(got.TokenHash) != string(cl.TokenHash) {
			t.Fatalf("claimed build %d of pipeline %d, want pipeline %d's with the claim's token", got.ID, got.PipelineID, pl.ID)
		}
		stored, err := store.Build(ctx, got.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(stored, got.Build) {
			t.Errorf("the claim returned\n%+v\nthe row reads\n%+v", got.Build, stored)
		}
		// run_deadline is not a Build field: the reaper's, read here from the row.
		var runDeadline *time.Time
		if err := store.pool.QueryRow(ctx, `SELECT run_deadline FROM builds WHERE id = $1`, got.ID).Scan(&runDeadline); err != nil {
			t.Fatal(err)
		}
		ev, _, err := store.Events(ctx, got.ID, builds.Page{Page: 1, PerPage: 100})
		if err != nil {
			t.Fatal(err)
		}
		after, err := store.Pipeline(ctx, p.ID, pl.ID)
		if err != nil {
			t.Fatal(err)
		}
		return claimed{got, runDeadline}, ev, after
	}
	// normalize blanks what differs between two pipelines of the same definition.
	normalize := func(c claimed, ev []builds.Event, pl builds.Pipeline) (claimed, []builds.Event, builds.Pipeline) {
		c.ID, c.PipelineID, c.TokenHash, c.CreatedAt, c.QueuedAt = 0, 0, nil, time.Time{}, nil
		c.Pipeline.IID, c.Pipeline.CreatedAt = 0, time.Time{}
		out := make([]builds.Event, len(ev))
		for i, e := range ev {
			e.ID, e.BuildID = 0, 0
			if e.Type != builds.EventAssigned {
				e.At = time.Time{} // queued: at the pipeline's creation
			}
			out[i] = e
		}
		pl.ID, pl.IID, pl.CreatedAt, pl.Builds = 0, 0, time.Time{}, nil
		return c, out, pl
	}
	for _, twoPhase := range []bool{true, false} {
		t.Run(map[bool]string{true: "two-phase", false: "legacy"}[twoPhase], func(t *testing.T) {
			wantC, wantEv, wantPl := normalize(claim(t, twoPhase, true))
			gotC, gotEv, gotPl := normalize(claim(t, twoPhase, false))
			if !reflect.DeepEqual(gotC, wantC) {
				t.Errorf("decided before the claim:\n%+v\nper candidate:\n%+v", gotC, wantC)
			}
			if !reflect.DeepEqual(gotEv, wantEv) {
				t.Errorf("events decided before the claim %+v, per candidate %+v", gotEv, wantEv)
			}
			if !reflect.DeepEqual(gotPl, wantPl) {
				t.Errorf("pipeline decided before the claim %+v, per candidate %+v", gotPl, wantPl)
			}
			want := builds.AssignedStatus(twoPhase)
			if gotC.Status != want || gotC.TwoPhase != twoPhase || (gotC.AckDeadline != nil) != twoPhase ||
				(gotC.StartedAt != nil) == twoPhase || gotPl.Status != "running" {
				t.Errorf("claimed %s two_phase %v ack_deadline %v started_at %v, pipeline %s; want %s",
					gotC.Status, gotC.TwoPhase, gotC.AckDeadline, gotC.StartedAt, gotPl.Status, want)
			}
			if twoPhase && !gotC.AckDeadline.Equal(deadline) {
				t.Errorf("ack deadline %v, want the claim's %v", gotC.AckDeadline, deadline)
			}
			if wantRun := now.Add(600 * time.Second); twoPhase && gotC.runDeadline != nil ||
				!twoPhase && (gotC.runDeadline == nil || !gotC.runDeadline.Equal(wantRun)) {
				t.Errorf("run deadline %v, want none (two-phase) or %v", gotC.runDeadline, wantRun)
			}
			if len(gotEv) != 2 || gotEv[1].Detail["two_phase"] != twoPhase {
				t.Errorf("events %+v, want queued and assigned with two_phase %v", gotEv, twoPhase)
			}
		})
	}
}
