package retry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/retry"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// failingLeases is real Redis except for TTLs, which fails while down is set: the fault
// the sweeper must survive.
type failingLeases struct {
	builds.Leases
	down bool
}

func (f *failingLeases) TTLs(ctx context.Context, ids []int64) (map[int64]time.Duration, error) {
	if f.down {
		return nil, errors.New("dial tcp: connection refused")
	}
	return f.Leases.TTLs(ctx, ids)
}

// assignTwoPhase creates n pending builds and assigns them two-phase at `at`.
func assignTwoPhase(t *testing.T, store *pgstore.Store, leases builds.Leases, n int, at time.Time, ttl time.Duration) []int64 {
	t.Helper()
	ctx := context.Background()
	jobs := make([]builds.JobDefinition, n)
	for i := range jobs {
		jobs[i] = builds.JobDefinition{Name: "job" + string(rune('a'+i)), Stage: "test", Script: []string{"true"}}
	}
	d := builds.PipelineDefinition{ProjectID: 1, Stages: []string{"test"}, Jobs: jobs}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreatePipeline(ctx, d, at); err != nil {
		t.Fatal(err)
	}
	r, err := store.CreateRunner(ctx, builds.Runner{RunUntagged: true}, secrettoken.Hash(secrettoken.New("glrt-")))
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.UpsertManager(ctx, r.ID, "s_test", builds.ManagerInfo{}, at, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := 0; i < n; i++ {
		b, err := store.Claim(ctx, builds.Claim{Runner: r, ManagerID: m.ID, SystemID: "s_test",
			TokenHash: secrettoken.Hash(secrettoken.New("glcbt-")), Now: at, AckDeadline: at.Add(ttl),
			TwoPhase: func(int64) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		if err := leases.Grant(ctx, b.ID, "1", ttl); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.ID)
	}
	return ids
}

func TestSweepWithRedisDownKeepsKeptAliveBuildsAndFailsOverdueOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pgstore.New(testenv.Pool(t))
	rdb, prefix := testenv.Redis(t)
	leases := &failingLeases{Leases: redisstore.New(rdb, prefix)}
	now := time.Now()
	// Two builds assigned 2 h ago (past the 1 h max wait), three assigned 10 min ago.
	old := assignTwoPhase(t, store, leases, 2, now.Add(-2*time.Hour), time.Minute)
	recent := assignTwoPhase(t, store, leases, 3, now.Add(-10*time.Minute), time.Minute)

	s := &retry.Sweeper{Store: store, Leases: leases, Policy: builds.DefaultRetryPolicy(2), MaxWait: time.Hour,
		Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	leases.down = true
	rep, err := s.SweepOnce(ctx)
	if err == nil {
		t.Fatal("SweepOnce with Redis down returned no error; want one so the loop backs off")
	}
	if rep.TimedOut != 2 || rep.Retried != 2 {
		t.Fatalf("with Redis down: timed out %d, retried %d; want the 2 builds past the max wait", rep.TimedOut, rep.Retried)
	}
	for _, id := range old {
		if b, _ := store.Build(ctx, id); b.Status != builds.StatusFailed || b.FailureReason != builds.ReasonRunnerProvisioningTimeout {
			t.Errorf("build %d past max wait: %s/%s, want failed/runner_provisioning_timeout", id, b.Status, b.FailureReason)
		}
	}
	for _, id := range recent {
		if b, _ := store.Build(ctx, id); b.Status != builds.StatusWaiting {
			t.Errorf("build %d: %s, want still waiting while Redis cannot be asked", id, b.Status)
		}
	}

	// Redis back: the recent builds' keys expired long ago (granted for 1 min, 10 min ago in
	// test time, but the real keys still live): drop them to model expiry, then sweep.
	leases.down = false
	for _, id := range recent[:2] {
		if err := leases.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = s.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TimedOut != 2 || rep.Extended != 1 {
		t.Fatalf("after Redis recovered: timed out %d, extended %d; want 2 and 1", rep.TimedOut, rep.Extended)
	}
	if b, _ := store.Build(ctx, recent[2]); b.Status != builds.StatusWaiting || !b.AckDeadline.After(now) {
		t.Errorf("kept-alive build %d: %s, deadline %v; want waiting with a deadline after now", recent[2], b.Status, b.AckDeadline)
	}
	// Nothing is processed twice.
	rep, err = s.SweepOnce(ctx)
	if err != nil || rep.TimedOut != 0 {
		t.Fatalf("third sweep: %+v, %v; want nothing to do", rep, err)
	}
}
