package builds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobapi/jobapi/secrettoken"
)

// racingStore is a Store whose build keeps changing under the service: each compare-and-set
// loses, and each read shows the next state in states. Only what UpdateJob's ack path calls
// is implemented; anything else panics on the nil embedded Store.
type racingStore struct {
	Store
	states []Status // what successive reads return; the last repeats
	reads  int
	acks   int
	hash   []byte
}

func (s *racingStore) Build(_ context.Context, id int64) (Build, error) {
	st := s.states[min(s.reads, len(s.states)-1)]
	s.reads++
	return Build{ID: id, Status: st, TokenHash: s.hash, UpdatedAt: time.Now()}, nil
}

func (s *racingStore) Acknowledge(context.Context, Ack) (Acked, error) {
	s.acks++
	return Acked{}, ErrConflict
}

type noLeases struct{}

func (noLeases) Grant(context.Context, int64, string, time.Duration) error   { return nil }
func (noLeases) Refresh(context.Context, int64, string, time.Duration) error { return nil }
func (noLeases) Release(context.Context, int64) error                        { return nil }
func (noLeases) TTLs(context.Context, []int64) (map[int64]time.Duration, error) {
	return nil, nil
}

func newRacingService(store Store) *Service {
	d := unitDeps(store)
	d.Config, d.Log = Config{TouchInterval: time.Hour}, slog.New(slog.NewTextHandler(io.Discard, nil))
	return NewService(d)
}

// TestUpdateJobRereadsAfterLosingTheRace: the fast ack loses (the build moved), the full
// path reads it waiting and loses again, then reads it running: the runner's state=running
// is then a keep-alive, answered running, without another write.
func TestUpdateJobRereadsAfterLosingTheRace(t *testing.T) {
	const token = "glcbt-racing-token-0123456789"
	store := &racingStore{states: []Status{StatusWaiting, StatusRunning}, hash: secrettoken.Hash(token)}
	st, err := newRacingService(store).UpdateJob(context.Background(), JobUpdate{ID: 9, Token: token, State: StateRunning})
	if err != nil || st != StatusRunning {
		t.Fatalf("UpdateJob = %q, %v; want running", st, err)
	}
	if store.acks != 2 || store.reads != 2 {
		t.Errorf("%d acks and %d reads, want 2 and 2 (fast path, one full round lost, one won)", store.acks, store.reads)
	}
}

// TestUpdateJobGivesUpOnEndlessConflicts: a build that changes on every round ends the
// loop with ErrConflict (answered 503, which the runner retries), not a spin.
func TestUpdateJobGivesUpOnEndlessConflicts(t *testing.T) {
	const token = "glcbt-racing-token-0123456789"
	store := &racingStore{states: []Status{StatusWaiting}, hash: secrettoken.Hash(token)}
	_, err := newRacingService(store).UpdateJob(context.Background(), JobUpdate{ID: 9, Token: token, State: StateRunning})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("UpdateJob error %v, want ErrConflict", err)
	}
	if store.reads != 5 || store.acks != 6 {
		t.Errorf("%d reads and %d acks, want 5 rounds after the fast path", store.reads, store.acks)
	}
}
