package pgstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/builds/triggers"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// Of many claims of one due tick at once, exactly one moves next_run_at; a claim with a
// due time already moved, or of an inactive schedule, moves nothing.
func TestClaimTickOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.Pool(t))
	p, err := s.CreateProject(ctx, builds.Project{Name: "sched", Path: "sched", DefaultBranch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	next := due.Add(24 * time.Hour)
	sc, err := s.CreateSchedule(ctx, schedules.Schedule{ProjectID: p.ID, Description: "nightly", Ref: "main",
		Cron: "0 2 * * *", CronTimezone: "UTC", Active: true, NextRunAt: due, CreatedAt: due.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateScheduleVariable(ctx, p.ID, sc.ID, schedules.Variable{Key: "NIGHTLY", Value: "1", VariableType: builds.VariableEnv}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateScheduleVariable(ctx, p.ID, sc.ID, schedules.Variable{Key: "NIGHTLY", Value: "2", VariableType: builds.VariableEnv}); !errors.Is(err, builds.ErrExists) {
		t.Errorf("second NIGHTLY: %v, want ErrExists", err)
	}
	list, err := s.DueSchedules(ctx, due, 10)
	if err != nil || len(list) != 1 || len(list[0].Variables) != 1 || list[0].Variables[0].Value != "1" {
		t.Fatalf("due at %s: %+v %v, want the schedule with its variable", due, list, err)
	}
	if list, err := s.DueSchedules(ctx, due.Add(-time.Second), 10); err != nil || len(list) != 0 {
		t.Errorf("due a second before: %+v %v, want none", list, err)
	}

	const claimers = 8
	var wins sync.WaitGroup
	results := make(chan bool, claimers)
	for range claimers {
		wins.Add(1)
		go func() {
			defer wins.Done()
			ok, err := s.ClaimTick(ctx, sc.ID, list[0].NextRunAt, next)
			if err != nil {
				t.Error(err)
			}
			results <- ok
		}()
	}
	wins.Wait()
	close(results)
	won := 0
	for ok := range results {
		if ok {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d claims of one tick won, want 1", won, claimers)
	}
	got, err := s.Schedule(ctx, p.ID, sc.ID)
	if err != nil || !got.NextRunAt.Equal(next) {
		t.Fatalf("after the claim: next_run_at %v (%v), want %v", got.NextRunAt, err, next)
	}
	if list, err := s.DueSchedules(ctx, due.Add(time.Hour), 10); err != nil || len(list) != 0 {
		t.Errorf("claimed schedule still due: %+v %v", list, err)
	}

	got.Active, got.NextRunAt = false, due
	if _, err := s.UpdateSchedule(ctx, got); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimTick(ctx, sc.ID, due, next); ok || err != nil {
		t.Errorf("claim of an inactive schedule: %v %v, want false", ok, err)
	}
	if list, err := s.DueSchedules(ctx, next, 10); err != nil || len(list) != 0 {
		t.Errorf("inactive schedule listed as due: %+v %v", list, err)
	}
	if _, err := s.Schedule(ctx, p.ID+1, sc.ID); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("schedule through another project: %v, want ErrNotFound", err)
	}
	if err := s.DeleteScheduleVariable(ctx, p.ID+1, sc.ID, "NIGHTLY"); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("variable deleted through another project: %v, want ErrNotFound", err)
	}
	if err := s.DeleteProject(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Schedule(ctx, p.ID, sc.ID); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("schedule of a deleted project: %v, want ErrNotFound", err)
	}
}

// A trigger is found by its token's hash and only so; the store keeps no token.
func TestTriggerByToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	s := New(pool)
	p, err := s.CreateProject(ctx, builds.Project{Name: "trig", Path: "trig", DefaultBranch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	token := secrettoken.New(triggers.TokenPrefix)
	tr, err := s.CreateTrigger(ctx, triggers.Trigger{ProjectID: p.ID, Description: "deploy", TokenLast4: token[len(token)-4:],
		CreatedAt: now, UpdatedAt: now}, secrettoken.Hash(token))
	if err != nil || tr.LastUsed != nil {
		t.Fatalf("create: %+v %v", tr, err)
	}
	if _, err := s.CreateTrigger(ctx, triggers.Trigger{ProjectID: p.ID + 100, TokenLast4: "abcd"}, secrettoken.Hash("x")); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("trigger of a missing project: %v, want ErrNotFound", err)
	}
	used, err := s.UseTrigger(ctx, secrettoken.Hash(token), now.Add(time.Minute))
	if err != nil || used.ID != tr.ID || used.LastUsed == nil || !used.LastUsed.Equal(now.Add(time.Minute)) {
		t.Fatalf("use: %+v %v", used, err)
	}
	if _, err := s.UseTrigger(ctx, secrettoken.Hash(token+"x"), now); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("use of a wrong token: %v, want ErrNotFound", err)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pipeline_triggers WHERE convert_to(token_last4, 'UTF8') = token_hash
		OR position(convert_to($1, 'UTF8') IN token_hash) > 0`, token).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("the token is stored in the clear (%d rows, %v)", stored, err)
	}
	if err := s.DeleteTrigger(ctx, p.ID, tr.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UseTrigger(ctx, secrettoken.Hash(token), now); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("use of a deleted trigger: %v, want ErrNotFound", err)
	}
	if err := s.DeleteTrigger(ctx, p.ID, tr.ID); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}
