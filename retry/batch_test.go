package retry_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/retry"
)

// slowStore is a slow Postgres: a batch takes perBuild per build, and one of more than fit
// builds cannot finish within the sweeper's batch timeout: it runs until the timeout and rolls
// back whole. Which batches fit is decided by their size, not by racing a real sleep against
// the deadline: on a loaded machine a goroutine woken late sees both the sleep and the
// deadline over, and a batch that fits would time out at random.
type slowStore struct {
	builds.Store
	perBuild time.Duration
	fit      int

	mu      sync.Mutex
	left    int
	batches []int
}

func (s *slowStore) SweepExpiredAcks(ctx context.Context, p builds.SweepParams) (builds.SweepResult, error) {
	s.mu.Lock()
	s.batches = append(s.batches, p.Batch)
	s.mu.Unlock()
	if p.Batch > s.fit {
		<-ctx.Done()
		return builds.SweepResult{}, ctx.Err()
	}
	time.Sleep(time.Duration(p.Batch) * s.perBuild) // what the sweeper measures to size the next batch
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(p.Batch, s.left)
	s.left -= n
	return builds.SweepResult{Candidates: n, TimedOut: n}, nil
}

type noLeases struct{}

func (noLeases) Grant(context.Context, int64, string, time.Duration) error   { return nil }
func (noLeases) Refresh(context.Context, int64, string, time.Duration) error { return nil }
func (noLeases) Release(context.Context, int64) error                        { return nil }
func (noLeases) TTLs(context.Context, []int64) (map[int64]time.Duration, error) {
	return nil, nil
}

// A batch that cannot finish in time is retried at once with half as many builds, later
// batches are sized to finish well within the timeout, and the next sweep starts from the
// size that worked: a slow Postgres still sees progress instead of the same rolled-back
// batch forever.
func TestSweepShrinksBatchesThatTimeOut(t *testing.T) {
	t.Parallel()
	// 200 builds fit in the timeout.
	store := &slowStore{perBuild: time.Millisecond, fit: 200, left: 1000}
	s := &retry.Sweeper{Store: store, Leases: noLeases{}, Batch: 500, BatchTimeout: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rep, err := s.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.TimedOut != 1000 || store.left != 0 {
		t.Fatalf("timed out %d, %d left; want all 1000 processed", rep.TimedOut, store.left)
	}
	// 500 and 250 time out; 125 works, and no later batch is too big.
	if len(store.batches) < 3 || store.batches[0] != 500 || store.batches[1] != 250 || store.batches[2] != 125 {
		t.Fatalf("batch sizes %v, want 500, 250, 125 first", store.batches)
	}
	for i, b := range store.batches[2:] {
		if b >= 200 {
			t.Fatalf("batch %d of %v: %d builds, more than fit in the timeout", i+2, store.batches, b)
		}
	}
	store.mu.Lock()
	store.left, store.batches = 100, nil
	store.mu.Unlock()
	if _, err := s.SweepOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if store.batches[0] >= 200 {
		t.Fatalf("next sweep started with a batch of %d; want one that fits in the timeout", store.batches[0])
	}
}
