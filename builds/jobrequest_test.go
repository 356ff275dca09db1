package builds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/secrettoken"
)

func TestPollOf(t *testing.T) {
	down := errors.New("redis down")
	for _, tc := range []struct {
		name              string
		version           string
		versionErr        error
		lastUpdate        string
		feedLive          bool
		want              poll
		askFeed           bool
		cached, takesTurn bool
	}{
		{name: "idle: echoes the current version", version: "7", lastUpdate: "7", feedLive: true,
			want: poll{version: "7", idle: true}, cached: true},
		{name: "after a bump, feed live", version: "8", lastUpdate: "7", feedLive: true,
			want: poll{version: "8", recorded: true}, askFeed: true, cached: true, takesTurn: true},
		{name: "after a bump, feed down", version: "8", lastUpdate: "7",
			want: poll{version: "8"}, askFeed: true, takesTurn: true},
		{name: "first poll", version: "8", feedLive: true,
			want: poll{version: "8", recorded: true}, askFeed: true, cached: true, takesTurn: true},
		{name: "queue version unreadable", versionErr: down, lastUpdate: "", feedLive: true,
			want: poll{}},
		{name: "queue version unreadable, echoed empty", versionErr: down, lastUpdate: "7", feedLive: true,
			want: poll{}},
		{name: "no version yet", version: "", lastUpdate: "", feedLive: true,
			want: poll{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			got := pollOf(tc.version, tc.versionErr, tc.lastUpdate, func() bool { asked = true; return tc.feedLive })
			if got != tc.want {
				t.Errorf("pollOf = %+v, want %+v", got, tc.want)
			}
			if asked != tc.askFeed {
				// An idle poll must not take the hub's lock: it is the fleet's common case.
				t.Errorf("feed asked: %v, want %v", asked, tc.askFeed)
			}
			if got.cachedRunner() != tc.cached {
				t.Errorf("cachedRunner = %v, want %v", got.cachedRunner(), tc.cached)
			}
			if got.takesTurn() != tc.takesTurn {
				t.Errorf("takesTurn = %v, want %v", got.takesTurn(), tc.takesTurn)
			}
			var noJob *NoJobError
			if err := got.noJob(); !errors.As(err, &noJob) || noJob.LastUpdate != tc.want.version {
				t.Errorf("noJob = %v, want a *NoJobError with LastUpdate %q", err, tc.want.version)
			}
		})
	}
}

func TestManagerSystemID(t *testing.T) {
	if got := managerSystemID(""); got != "<legacy>" {
		t.Errorf(`managerSystemID("") = %q, want "<legacy>"`, got)
	}
	if got := managerSystemID("s_0123abcd"); got != "s_0123abcd" {
		t.Errorf(`managerSystemID("s_0123abcd") = %q`, got)
	}
}

func TestNewClaimAckDeadline(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := Runner{ID: 9, Tags: []string{"docker"}}
	hash := secrettoken.Hash("glcbt-abc")
	c := newClaim(r, 42, "s_1", hash, now, 90*time.Second)
	if c.Runner.ID != 9 || c.ManagerID != 42 || c.SystemID != "s_1" || !bytes.Equal(c.TokenHash, hash) || !c.Now.Equal(now) {
		t.Errorf("newClaim = %+v: runner, manager, system id, token hash or now not taken over", c)
	}
	if want := now.Add(90 * time.Second); !c.AckDeadline.Equal(want) {
		t.Errorf("AckDeadline = %s, want %s", c.AckDeadline, want)
	}
	if c.TwoPhase != nil || c.WaitForAck {
		t.Errorf("a new claim is legacy until decideTwoPhase: TwoPhase set %v, WaitForAck %v", c.TwoPhase != nil, c.WaitForAck)
	}
}

// flagAnswers is a TwoPhaseFlag with fixed answers that records what it was asked.
type flagAnswers struct {
	on, anyProject bool
	perProject     map[int64]bool
	asked          []string
}

func (f *flagAnswers) TwoPhaseCommit(_ context.Context, projectID, runnerID int64, systemID string) bool {
	f.asked = append(f.asked, "project")
	if runnerID != 9 || systemID != "s_1" {
		panic("asked for another runner")
	}
	return f.perProject[projectID]
}

func (f *flagAnswers) TwoPhaseCommitAnyProject(_ context.Context, runnerID int64, systemID string) (bool, bool) {
	f.asked = append(f.asked, "any")
	if runnerID != 9 || systemID != "s_1" {
		panic("asked for another runner")
	}
	return f.on, f.anyProject
}

func (f *flagAnswers) CountTwoPhaseCommit(bool) { f.asked = append(f.asked, "count") }

func TestDecideTwoPhase(t *testing.T) {
	ctx := context.Background()
	claim := func() Claim { return newClaim(Runner{ID: 9}, 1, "s_1", nil, time.Now(), time.Minute) }

	t.Run("runner without the feature: legacy, flag not asked", func(t *testing.T) {
		f := &flagAnswers{on: true, anyProject: true}
		c := claim()
		if decided := decideTwoPhase(ctx, f, &c, false); decided || c.WaitForAck || c.TwoPhase != nil || len(f.asked) != 0 {
			t.Errorf("decided %v, WaitForAck %v, per-project %v, flag asked %v", decided, c.WaitForAck, c.TwoPhase != nil, f.asked)
		}
	})
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("one answer for every project: %v", on), func(t *testing.T) {
			f := &flagAnswers{on: on, anyProject: true}
			c := claim()
			decided := decideTwoPhase(ctx, f, &c, true)
			if !decided || c.WaitForAck != on || c.TwoPhase != nil {
				t.Errorf("on=%v: decided %v, WaitForAck %v, per-project %v", on, decided, c.WaitForAck, c.TwoPhase != nil)
			}
			if len(f.asked) != 1 || f.asked[0] != "any" {
				t.Errorf("flag asked %v, want once for any project (counting waits for the claim)", f.asked)
			}
		})
	}
	t.Run("answer depends on the project: the claim asks per candidate", func(t *testing.T) {
		f := &flagAnswers{anyProject: false, perProject: map[int64]bool{5: true}}
		c := claim()
		if decided := decideTwoPhase(ctx, f, &c, true); decided || c.TwoPhase == nil {
			t.Fatalf("decided %v, per-project %v: want undecided with a per-project question", decided, c.TwoPhase != nil)
		}
		if !c.TwoPhase(5) || c.TwoPhase(6) {
			t.Errorf("per-project answers: 5 → %v, 6 → %v; want true, false", c.TwoPhase(5), c.TwoPhase(6))
		}
		if len(f.asked) != 3 || f.asked[1] != "project" || f.asked[2] != "project" {
			t.Errorf("flag asked %v", f.asked)
		}
	})
	t.Run("a service without flags is legacy for every build", func(t *testing.T) {
		c := claim()
		if decided := decideTwoPhase(ctx, neverTwoPhase{}, &c, true); !decided || c.WaitForAck || c.TwoPhase != nil {
			t.Errorf("decided %v, WaitForAck %v, per-project %v", decided, c.WaitForAck, c.TwoPhase != nil)
		}
	})
}

// TestNothingClaimedAnswersTheProfile: once a claim finds nothing at a version, its
// profile's later polls at that version get 204 without a claim, those with a recorded
// poll straight from claimpacing.EmptyProfiles and the others from the claim flight, and another
// profile or version still claims.
func TestNothingClaimedAnswersTheProfile(t *testing.T) {
	ctx := context.Background()
	s := &Service{empties: claimpacing.NewEmptyProfiles(), flights: claimpacing.NewFlights()}
	docker := Runner{ID: 1, Tags: []string{"docker"}}
	shell := Runner{ID: 2, Tags: []string{"shell"}}

	_, slot, err := s.takeTurn(ctx, "", poll{version: "8"}, docker)
	if err != nil || slot == nil {
		t.Fatalf("first claim at version 8: slot %v, error %v; want a slot", slot, err)
	}
	var noJob *NoJobError
	if err := s.nothingClaimed(docker, "8", slot); !errors.As(err, &noJob) || noJob.LastUpdate != "8" {
		t.Fatalf("nothingClaimed = %v, want a *NoJobError at version 8", err)
	}
	for _, p := range []poll{{version: "8", recorded: true}, {version: "8"}} {
		if _, slot, err := s.takeTurn(ctx, "", p, Runner{ID: 3, Tags: []string{"docker"}}); !errors.As(err, &noJob) || slot != nil {
			t.Errorf("same profile, %+v: slot %v, error %v; want 204 without a claim", p, slot, err)
		}
	}
	if _, slot, err := s.takeTurn(ctx, "", poll{version: "8"}, shell); err != nil || slot == nil {
		t.Errorf("another profile at version 8: slot %v, error %v; want its own claim", slot, err)
	}
	if _, slot, err := s.takeTurn(ctx, "", poll{version: "9"}, docker); err != nil || slot == nil {
		t.Errorf("the profile at version 9: slot %v, error %v; want a claim", slot, err)
	}
	if err := s.nothingClaimed(docker, "", nil); !errors.As(err, &noJob) || noJob.LastUpdate != "" {
		t.Errorf("without a queue version: %v, want a *NoJobError", err)
	}
	if s.empties.Empty(profileKey(docker), "") {
		t.Error("a claim without a queue version recorded its profile as empty")
	}
}
