package pgstore

import "context"

// The long poll (builds/longpoll) wakes, per runner profile, as many held requests as
// there are builds a claim of that profile could take. It counts them with the claim's own
// candidate conditions, only without the oldest-first order, the LIMIT 1 and the lock, so
// that what it counts is what the claim would find (TestCountClaimableAgreesWithClaim).
// Builds locked by claims in flight are counted too: a count too high wakes a request that
// finds nothing (and recounts), one too low would leave a build waiting.
const (
	countClaimable = `SELECT count(*) FROM (` + claimMatching + `
    LIMIT $3) c`
	countClaimableUntagged = `SELECT count(*) FROM (` + claimUntaggedMatching + `
    LIMIT $3) c`
	countClaimableProtected = `SELECT count(*) FROM (` + claimMatching + claimProtected + `
    LIMIT $3) c`
	countClaimableProtectedUntagged = `SELECT count(*) FROM (` + claimUntaggedMatching + claimProtected + `
    LIMIT $3) c`
)

// CountClaimable returns how many pending builds a runner with these tags, run_untagged
// setting and access level (protectedOnly: ref_protected) could claim, up to limit.
func (s *Store) CountClaimable(ctx context.Context, tags []string, runUntagged, protectedOnly bool, limit int) (int, error) {
	if tags == nil {
		tags = []string{}
	}
	q := countClaimable
	if protectedOnly {
		q = countClaimableProtected
	}
	if len(tags) == 0 {
		if !runUntagged {
			return 0, nil // as Claim: it may run neither tagged nor untagged builds
		}
		q = countClaimableUntagged
		if protectedOnly {
			q = countClaimableProtectedUntagged
		}
	}
	var n int
	err := s.pool.QueryRow(ctx, q, tags, runUntagged, limit).Scan(&n)
	return n, err
}
