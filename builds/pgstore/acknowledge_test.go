package pgstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// TestAcknowledgeReadsMasked: with ReadMasked the ack's one statement also returns the
// masked variables of the build's payload and of its project, what a replica that never
// saw the build needs to mask its trace; without it, none. A wrong token or a build no
// longer waiting changes nothing (ErrConflict), and the ack happens once.
func TestAcknowledgeReadsMasked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := New(testenv.Pool(t))
	p, err := store.CreateProject(ctx, builds.Project{Name: "acked", Path: "acked", RepoURL: "https://example.com/acked.git",
		DefaultBranch: "main", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []builds.ProjectVariable{
		{Key: "Z_SECRET", Value: "project-secret-1", Masked: true, VariableType: builds.VariableEnv},
		{Key: "A_SECRET", Value: "project-secret-2", Masked: true, Protected: true, VariableType: builds.VariableEnv},
		{Key: "PLAIN", Value: "not a secret", VariableType: builds.VariableEnv},
	} {
		if err := store.CreateProjectVariable(ctx, p.ID, v); err != nil {
			t.Fatal(err)
		}
	}
	jobVars := []builds.Variable{{Key: "JOB_SECRET", Value: "job-secret-value", Masked: true}, {Key: "JOB_PLAIN", Value: "x"}}
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: p.ID, Stages: []string{"test"}, Jobs: []builds.JobDefinition{
		{Name: "a", Stage: "test", Script: []string{"true"}, Variables: jobVars},
		{Name: "b", Stage: "test", Script: []string{"true"}, Variables: jobVars},
	}})
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: p.ID + 1000, Stages: []string{"test"}, Jobs: []builds.JobDefinition{
		{Name: "implicit", Stage: "test", Script: []string{"true"}},
	}})
	c := newClaimer(t, store)
	c.claim.TwoPhase = func(int64) bool { return true }
	c.claim.AckDeadline = time.Now().Add(time.Minute)
	claim := func() (builds.Claimed, []byte) {
		cl := c.claim
		token := secrettoken.New(builds.JobTokenPrefix)
		cl.TokenHash, cl.Now = secrettoken.Hash(token), time.Now()
		got, err := store.Claim(ctx, cl)
		if err != nil || got.Status != builds.StatusWaiting {
			t.Fatalf("claim: %s %v", got.Status, err)
		}
		return got, cl.TokenHash
	}

	a, aHash := claim()
	if _, err := store.Acknowledge(ctx, builds.Ack{ID: a.ID, TokenHash: secrettoken.Hash("glcbt-wrong"), Now: time.Now(), ReadMasked: true}); !errors.Is(err, builds.ErrConflict) {
		t.Fatalf("ack with a wrong token: %v, want ErrConflict", err)
	}
	if b, err := store.Build(ctx, a.ID); err != nil || b.Status != builds.StatusWaiting {
		t.Fatalf("after the wrong token: %s %v, want still waiting", b.Status, err)
	}
	acked, err := store.Acknowledge(ctx, builds.Ack{ID: a.ID, TokenHash: aHash, Now: time.Now(), ReadMasked: true})
	if err != nil {
		t.Fatal(err)
	}
	want := &builds.AckedMasked{
		Variables: []builds.Variable{{Key: "JOB_SECRET", Value: "job-secret-value", Masked: true}},
		Project: []builds.Variable{{Key: "A_SECRET", Value: "project-secret-2", Masked: true},
			{Key: "Z_SECRET", Value: "project-secret-1", Masked: true}},
	}
	if !reflect.DeepEqual(acked.Masked, want) {
		t.Errorf("masked variables %+v, want %+v", acked.Masked, want)
	}
	if acked.PipelineID != a.PipelineID || acked.StageIdx != a.StageIdx || acked.AssignedAt.IsZero() || acked.TraceSize != 0 {
		t.Errorf("acked %+v: want pipeline %d stage %d, an assignment time, no trace", acked, a.PipelineID, a.StageIdx)
	}
	if _, err := store.Acknowledge(ctx, builds.Ack{ID: a.ID, TokenHash: aHash, Now: time.Now(), ReadMasked: true}); !errors.Is(err, builds.ErrConflict) {
		t.Fatalf("second ack: %v, want ErrConflict", err)
	}

	b, bHash := claim()
	acked, err = store.Acknowledge(ctx, builds.Ack{ID: b.ID, TokenHash: bHash, Now: time.Now()})
	if err != nil || acked.Masked != nil {
		t.Fatalf("ack without ReadMasked: masked %+v, %v; want none read", acked.Masked, err)
	}

	implicit, iHash := claim()
	acked, err = store.Acknowledge(ctx, builds.Ack{ID: implicit.ID, TokenHash: iHash, Now: time.Now(), ReadMasked: true})
	if err != nil || acked.Masked == nil || len(acked.Masked.Variables) != 0 || len(acked.Masked.Project) != 0 {
		t.Fatalf("ack of an implicit project's build: masked %+v, %v; want read and empty", acked.Masked, err)
	}
	for _, id := range []int64{a.ID, b.ID, implicit.ID} {
		if got, err := store.Build(ctx, id); err != nil || got.Status != builds.StatusRunning || got.StartedAt == nil {
			t.Errorf("build %d after its ack: %s started %v, %v", id, got.Status, got.StartedAt, err)
		}
	}
}
