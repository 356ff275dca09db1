// Package claimpacing decides which job requests go to the claim, and when, so that a
// fleet of thousands does not send every poll to Postgres: the record of profiles a claim
// found empty at a queue version (EmptyProfiles), one claim per profile and version in
// flight (Flights), and the paced claims of polls that could not read the queue version
// (Fallback). A profile is a key the caller makes of what a claim matches a runner on; the
// claim itself, and its compare-and-set, stay the caller's: this only decides who asks.
package claimpacing
