package reaper

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/periodic"
)

// StaleManagers removes runner managers not seen for After, as GitLab does after 7 days:
// a runner token used from short-lived machines (autoscaled pods, throwaway VMs) leaves a
// manager per machine, and each counts against the runner's cap of managers. A machine that
// comes back later is simply recorded again. Safe on every replica (SKIP LOCKED batches).
type StaleManagers struct {
	Store    builds.Store
	After    time.Duration // 0: off
	Interval time.Duration
	Batch    int
	Now      func() time.Time
	Log      *slog.Logger
}

// RemoveOnce removes every manager stale now, batch by batch, and returns how many.
func (s *StaleManagers) RemoveOnce(ctx context.Context) (int, error) {
	if s.After <= 0 {
		return 0, nil
	}
	batch := s.Batch
	if batch <= 0 {
		batch = 500
	}
	before := now(s.Now).Add(-s.After)
	total := 0
	for {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		n, err := s.Store.DeleteStaleManagers(bctx, before, batch)
		cancel()
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
}

// Run removes stale managers every Interval until ctx ends.
func (s *StaleManagers) Run(ctx context.Context) error {
	return periodic.Run(ctx, s.Interval, s.Log, "stale manager removal", func(ctx context.Context) error {
		n, err := s.RemoveOnce(ctx)
		if n > 0 {
			s.Log.InfoContext(ctx, "removed stale runner managers", "count", n, "not_seen_for", s.After.String())
		}
		return err
	})
}
