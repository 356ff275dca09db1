package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// TestCountClaimableAgreesWithClaim: for runner profiles of every kind (untagged only,
// tagged with and without run_untagged, a tag set that covers several builds' tags, one
// that covers none), CountClaimable says exactly how many builds the claim then hands the
// profile one by one before it finds none; the limit caps the count; and the count holds
// no row lock (it must not stand in a claim's way). Each profile also as ref_protected, with
// half of the builds on an unprotected ref.
func TestCountClaimableAgreesWithClaim(t *testing.T) {
	t.Parallel()
	for _, q := range []string{countClaimable, countClaimableUntagged, countClaimableProtected, countClaimableProtectedUntagged} {
		if strings.Contains(q, "FOR UPDATE") || strings.Contains(q, "ORDER BY") {
			t.Fatalf("the count keeps the claim's lock or order: %s", q)
		}
	}
	type profile struct {
		tags          []string
		runUntagged   bool
		protectedOnly bool
	}
	var profiles []profile
	for _, p := range []profile{
		{nil, true, false}, {nil, false, false}, {[]string{"a"}, false, false}, {[]string{"a"}, true, false},
		{[]string{"a", "b"}, false, false}, {[]string{"b", "c"}, true, false}, {[]string{"z"}, false, false},
	} {
		profiles = append(profiles, p)
		p.protectedOnly = true
		profiles = append(profiles, p)
	}
	for _, p := range profiles {
		t.Run(fmt.Sprintf("%v,%v,%v", p.tags, p.runUntagged, p.protectedOnly), func(t *testing.T) {
			t.Parallel()
			store := New(testenv.Pool(t))
			var jobs []builds.JobDefinition
			for i, tags := range [][]string{nil, nil, {"a"}, {"a"}, {"a"}, {"a", "b"}, {"a", "b"}, {"b"}, {"c", "b"}} {
				jobs = append(jobs, builds.JobDefinition{Name: fmt.Sprintf("job %d", i), Stage: "test", Script: []string{"true"}, Tags: tags})
			}
			// Project 1 has no row: main is its protected branch.
			createPipeline(t, store, builds.PipelineDefinition{ProjectID: 1, Ref: "main", Stages: []string{"test"}, Jobs: jobs})
			createPipeline(t, store, builds.PipelineDefinition{ProjectID: 1, Ref: "feature", Stages: []string{"test"}, Jobs: jobs})
			c := newClaimer(t, store)
			c.claim.Runner.Tags, c.claim.Runner.RunUntagged = p.tags, p.runUntagged
			if p.protectedOnly {
				c.claim.Runner.AccessLevel = builds.AccessRefProtected
			}
			n, err := store.CountClaimable(t.Context(), p.tags, p.runUntagged, p.protectedOnly, 100)
			if err != nil {
				t.Fatal(err)
			}
			if capped, err := store.CountClaimable(t.Context(), p.tags, p.runUntagged, p.protectedOnly, 1); err != nil || capped != min(n, 1) {
				t.Errorf("limit 1: %d, %v; want %d", capped, err, min(n, 1))
			}
			claims := 0
			for ; claims <= 2*len(jobs); claims++ {
				cl := c.claim
				cl.TokenHash, cl.Now = secrettoken.Hash(secrettoken.New(builds.JobTokenPrefix)), time.Now()
				got, err := store.Claim(t.Context(), cl)
				if errors.Is(err, builds.ErrNoBuild) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				if p.protectedOnly && (!got.Build.Protected || got.Build.Ref != "main") {
					t.Errorf("a ref_protected claim took build %d of ref %q (protected %v)", got.Build.ID, got.Build.Ref, got.Build.Protected)
				}
			}
			if claims != n {
				t.Errorf("CountClaimable said %d, the claim took %d", n, claims)
			}
			if left, err := store.CountClaimable(t.Context(), p.tags, p.runUntagged, p.protectedOnly, 100); err != nil || left != 0 {
				t.Errorf("after the claims: %d, %v; want 0", left, err)
			}
		})
	}
}
