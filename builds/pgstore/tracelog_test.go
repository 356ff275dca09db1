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
	if js, err := store.ClaimTraceArchives(t.Context(), now, time.Minute, 10, nil); err != nil || len(js) != 0 {
		t.Fatalf("claims before any finish: %v, %v", js, err)
	}
	var ids []int64
	for range 6 {
		b := c.take(t)
		c.succeed(t, b.ID)
		ids = append(ids, b.ID)
	}
	first, err := store.ClaimTraceArchives(t.Context(), now, time.Minute, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := store.ClaimTraceArchives(t.Context(), now, time.Minute, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 4 || len(second) != 2 {
		t.Fatalf("claims of 4 among 6: %d then %d", len(first), len(second))
	}
	seen := map[int64]bool{}
	for _, j := range append(first, second...) {
		if seen[j.BuildID] || j.ProjectID != 3 || j.Archived {
			t.Errorf("claim %+v: taken twice or wrong", j)
		}
		seen[j.BuildID] = true
	}
	if js, _ := store.ClaimTraceArchives(t.Context(), now.Add(59*time.Second), time.Minute, 10, nil); len(js) != 0 {
		t.Errorf("claimed again within the lease: %d", len(js))
	}
	if err := store.DeferTraceArchive(t.Context(), ids[0], now.Add(time.Hour), "store down"); err != nil {
		t.Fatal(err)
	}
	js, err := store.ClaimTraceArchives(t.Context(), now.Add(2*time.Minute), time.Minute, 10, nil)
	if err != nil || len(js) != 5 {
		t.Fatalf("after the lease: %d claimed (%v), want the 5 not deferred", len(js), err)
	}
	js, err = store.ClaimTraceArchives(t.Context(), now.Add(2*time.Hour), time.Minute, 10, []int64{ids[0]})
	if err != nil || len(js) != 1 || js[0].BuildID != ids[0] || js[0].Attempts != 1 {
		t.Fatalf("the deferred build after its backoff: %+v, %v", js, err)
	}
}
