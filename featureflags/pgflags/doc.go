// Package pgflags stores jobapi's feature flags in Postgres and serves them to the
// OpenFeature SDK. The semantics are GitLab's (Flipper's): a flag is on for an evaluation if
//
//  1. its boolean gate is on, else
//  2. its actor gates hold "project:<targeting key>" or "runner:<runner_id attribute>", else
//  3. its percentage_of_actors gate is set and crc32(name+targetingKey) % 100000 < pct*1000;
//
// otherwise it is off. A flag nobody ever set is off. Disabling a flag (SetBoolean false)
// clears its actor and percentage gates too, as Flipper's disable does.
//
// Store is the write side, used by the operator API; every change commits with a
// NOTIFY on channel jobapi_feature_flags. Provider is the read side: it keeps every flag in
// memory, so an evaluation never waits on Postgres, and reloads on each NOTIFY and every
// Options.Refresh as a backstop for lost notifications. If it cannot reload for longer than
// Options.Staleness it refuses to answer from old data: evaluations then return the
// caller's default with an error, which featureflags.Flags counts as a fallback.
//
// Lifecycle: register the Provider with the SDK (Init loads the first snapshot), and run
// Provider.Run in the server's errgroup; it owns the refresh and LISTEN goroutines and
// returns when its context ends. Without Run the snapshot goes stale and flags fall back.
package pgflags
