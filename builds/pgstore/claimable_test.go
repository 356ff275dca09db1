package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// TestCountClaimableAgreesWithClaim: for runner profiles of every kind (untagged only,
// tagged with and without run_untagged, a tag set that covers several builds' tags, one
// that covers none), CountClaimable says exactly how many builds the claim then hands the
// profile one by one before it finds none; the limit caps the count; and the count holds
// no row lock (it must not stand in a claim's way).
func TestCountClaimableAgreesWithClaim(t *testing.T) {
	t.Parallel()
	for _, q := range []string{countClaimable, countClaimableUntagged} {
		if strings.Contains(q, "FOR UPDATE") || strings.Contains(q, "ORDER BY") {
			t.Fatalf("the count keeps the claim's lock or order: %s", q)
		}
	}
	profiles := []struct {
		tags        []string
		runUntagged bool
	}{
		{nil, true}, {nil, false}, {[]string{"a"}, false}, {[]string{"a"}, true},
		{[]string{"a", "b"}, false}, {[]string{"b", "c"}, true}, {[]string{"z"}, false},
	}
	for _, p := range profiles {
		t.Run(fmt.Sprintf("%v,%v", p.tags, p.runUntagged), func(t *testing.T) {
			t.Parallel()
			store := New(testenv.Pool(t))
			var jobs []builds.JobDefinition
			for i, tags := range [][]string{nil, nil, {"a"}, {"a"}, {"a"}, {"a", "b"}, {"a", "b"}, {"b"}, {"c", "b"}} {
				jobs = append(jobs, builds.JobDefinition{Name: fmt.Sprintf("job %d", i), Stage: "test", Script: []string{"true"}, Tags: tags})
			}
			createPipeline(t, store, builds.PipelineDefinition{ProjectID: 1, Stages: []string{"test"}, Jobs: jobs})
			c := newClaimer(t, store)
			c.claim.Runner.Tags, c.claim.Runner.RunUntagged = p.tags, p.runUntagged
			n, err := store.CountClaimable(t.Context(), p.tags, p.runUntagged, 100)
			if err != nil {
				t.Fatal(err)
			}
			if capped, err := store.CountClaimable(t.Context(), p.tags, p.runUntagged, 1); err != nil || capped != min(n, 1) {
				t.Errorf("limit 1: %d, %v; want %d", capped, err, min(n, 1))
			}
			claims := 0
			for ; claims <= len(jobs); claims++ {
				cl := c.claim
				cl.TokenHash, cl.Now = builds.HashToken(builds.NewToken(builds.JobTokenPrefix)), time.Now()
				if _, err := store.Claim(t.Context(), cl); errors.Is(err, builds.ErrNoBuild) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if claims != n {
				t.Errorf("CountClaimable said %d, the claim took %d", n, claims)
			}
			if left, err := store.CountClaimable(t.Context(), p.tags, p.runUntagged, 100); err != nil || left != 0 {
				t.Errorf("after the claims: %d, %v; want 0", left, err)
			}
		})
	}
}
