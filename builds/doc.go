// Package builds is jobapi's domain: build states and the rules that move a build between
// them, the auto-retry policy, pipeline definitions, and the Service that the HTTP handlers
// and background workers call. It imports only the standard library; Postgres and Redis
// live behind the Store and Leases interfaces it declares (see builds/pgstore and
// builds/redisstore).
//
// States (SPEC §3):
//
//	created ──stage reached──▶ pending ──claim (legacy)──────────────────────▶ running
//	                              │                                            ▲   │
//	                              └─claim (two-phase)─▶ waiting_for_runner_ack ─ack┘   │
//	                                                     │ ack timeout / decline       │
//	                                                     ▼                             ▼
//	                                                   failed ──auto-retry──▶ new build (pending)
//	running ──cancel──▶ canceling ──final update──▶ canceled
//	running ──final update──▶ success | failed
//	created ──earlier stage failed──▶ skipped
//
// Postgres holds the state of record and every transition is a compare-and-set
// (UPDATE … WHERE status = expected). Redis only holds the ack TTL: losing it can make a
// waiting build time out early, never run twice.
package builds
