package claimpacing

import "sync"

// EmptyProfiles remembers, per runner profile (its key: what a claim matches on), the
// queue version at which a claim of that profile last found nothing. A poll after a bump
// echoes the old version and would go to Postgres; with a fleet of thousands every bump then
// sends every runner there within one poll interval, though a single claim per profile
// already showed there is nothing for it. A poll whose profile was answered empty at the
// current version is answered 204 from here. It is never wrong for longer than the version
// stays: the version is read before the claim, and a build that becomes claimable after
// the claim's snapshot bumps it (after its commit), so that the record no longer matches.
type EmptyProfiles struct {
	mu sync.Mutex
	at map[string]string
}

// maxEmptyProfiles bounds the record; past it the record starts over (a claim each).
const maxEmptyProfiles = 10_000

// NewEmptyProfiles returns an empty record.
func NewEmptyProfiles() *EmptyProfiles { return &EmptyProfiles{at: map[string]string{}} }

// Empty reports whether a claim of profile found nothing at version.
func (e *EmptyProfiles) Empty(profile, version string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at[profile] == version
}

// Record notes that a claim of profile, at version, found nothing.
func (e *EmptyProfiles) Record(profile, version string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.at) >= maxEmptyProfiles {
		clear(e.at)
	}
	e.at[profile] = version
}
