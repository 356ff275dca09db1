package reaper_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/reaper"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Managers not seen for After are removed, in batches, and the others stay; a removed
// machine that comes back is recorded again.
func TestStaleManagersRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(testenv.Pool(t))
	r, err := store.CreateRunner(ctx, builds.Runner{RunUntagged: true}, secrettoken.Hash(secrettoken.New("glrt-")))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	seen := map[string]time.Time{
		"s_old1": now.Add(-8 * 24 * time.Hour), "s_old2": now.Add(-30 * 24 * time.Hour),
		"s_old3": now.Add(-7*24*time.Hour - time.Minute), "s_recent": now.Add(-6 * 24 * time.Hour), "s_now": now,
	}
	for id, at := range seen {
		if _, err := store.UpsertManager(ctx, r.ID, id, builds.ManagerInfo{}, at, 0); err != nil {
			t.Fatal(err)
		}
	}
	s := &reaper.StaleManagers{Store: store, After: 7 * 24 * time.Hour, Batch: 2, Now: func() time.Time { return now },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, err := s.RemoveOnce(ctx)
	if err != nil || n != 3 {
		t.Fatalf("removed %d (%v), want the 3 managers older than 7 days", n, err)
	}
	got, total, err := store.Runner(ctx, r.ID, builds.Page{Page: 1, PerPage: 10})
	if err != nil || total != 2 || len(got.Managers) != 2 {
		t.Fatalf("left %d managers (%v): %+v, want s_recent and s_now", total, err, got.Managers)
	}
	for _, m := range got.Managers {
		if m.SystemID != "s_recent" && m.SystemID != "s_now" {
			t.Errorf("manager %s should have been removed", m.SystemID)
		}
	}
	if n, err := s.RemoveOnce(ctx); err != nil || n != 0 {
		t.Errorf("second pass removed %d (%v), want 0", n, err)
	}
	if _, err := store.UpsertManager(ctx, r.ID, "s_old1", builds.ManagerInfo{}, now, 0); err != nil {
		t.Errorf("a removed machine coming back: %v", err)
	}
	if n, err := (&reaper.StaleManagers{Store: store}).RemoveOnce(ctx); err != nil || n != 0 {
		t.Errorf("with After 0 (off): removed %d (%v)", n, err)
	}
}
