package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// TestTraceArchiveClaims: a build is listed for archiving by the transaction that finishes
// it; concurrent claims take disjoint builds; a claimed build is not due again before its
// lease ends, a deferred one before its backoff.
func TestTraceArchiveClaims(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	var jobs []builds.JobDefinition
	for i := range 6 {
		jobs = append(jobs, builds.JobDefinition{Name: fmt.Sprintf("j%d", i), Script: []string{"true"}})
	}
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 3, Jobs: jobs})
	now := time.Now()
	if js, err := claimArchives(t, store, now, 10, nil); err != nil || len(js) != 0 {
		t.Fatalf("claims before any finish: %v, %v", js, err)
	}
	var ids []int64
	for range 6 {
		b := c.take(t)
		c.succeed(t, b.ID)
		ids = append(ids, b.ID)
	}
	first, err := claimArchives(t, store, now, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := claimArchives(t, store, now, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 4 || len(second) != 2 {
		t.Fatalf("claims of 4 among 6: %d then %d", len(first), len(second))
	}
	seen := map[int64]bool{}
	for _, j := range append(first, second...) {
		if seen[j.BuildID] || j.ProjectID != 3 || j.Archived || j.Status != builds.StatusSuccess {
			t.Errorf("claim %+v: taken twice or wrong", j)
		}
		seen[j.BuildID] = true
		// The claim lists the key its archive writes for cleanup, before any object exists.
		var listed bool
		if err := store.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM object_cleanup WHERE object_key = $1)`, j.ObjectKey).Scan(&listed); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("artifacts/3/%d/trace-", j.BuildID); !listed || len(j.ObjectKey) <= len(want) || j.ObjectKey[:len(want)] != want {
			t.Errorf("claim of build %d: key %q listed for cleanup %v; want artifacts/3/<build>/trace-<tag>, listed", j.BuildID, j.ObjectKey, listed)
		}
	}
	if js, _ := claimArchives(t, store, now.Add(59*time.Second), 10, nil); len(js) != 0 {
		t.Errorf("claimed again within the lease: %d", len(js))
	}
	if err := store.DeferTraceArchive(t.Context(), ids[0], now.Add(time.Hour), "store down"); err != nil {
		t.Fatal(err)
	}
	js, err := claimArchives(t, store, now.Add(2*time.Minute), 10, nil)
	if err != nil || len(js) != 5 {
		t.Fatalf("after the lease: %d claimed (%v), want the 5 not deferred", len(js), err)
	}
	js, err = claimArchives(t, store, now.Add(2*time.Hour), 10, []int64{ids[0]})
	if err != nil || len(js) != 1 || js[0].BuildID != ids[0] || js[0].Attempts != 1 {
		t.Fatalf("the deferred build after its backoff: %+v, %v", js, err)
	}
}

// claimArchives claims as the archive pass does, with a key tag of its own per call.
func claimArchives(t *testing.T, store *Store, now time.Time, limit int, ids []int64) ([]builds.TraceArchiveJob, error) {
	t.Helper()
	return store.ClaimTraceArchives(t.Context(), builds.TraceArchiveClaim{Now: now, Lease: time.Minute, Limit: limit, IDs: ids,
		KeyTag: fmt.Sprintf("t%d", time.Now().UnixNano()), KeyDue: now.Add(time.Hour), InlineMax: 1 << 10})
}
