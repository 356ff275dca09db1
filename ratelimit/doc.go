// Package ratelimit counts requests per key in fixed windows shared by every replica
// through Redis, and answers what a runner needs to back off politely: whether the request
// may go on, how many are left, and when the window resets.
//
// # Counting
//
// A window's key in Redis holds the count of every replica and expires with the window. A
// round trip per request would cost more than most keys deserve (a job sends a few updates
// a minute against a budget of 200), so each Limiter keeps, per window key, synced (the
// highest count Redis returned for it), pending (requests it admitted and has not sent) and
// sending (sent, answer not back yet). With H = Requests/2 (integer division):
//
//	synced+sending+pending+1 <= H    local: admitted, pending++, no Redis call
//	synced >= Requests               local: refused (a window's count never goes down)
//	otherwise (near the limit)       count pending+1 in Redis; decided from the result
//
// Run sends every key's pending count each SyncInterval and raises synced from the results.
// Counting is one script (countScript: INCRBY, and PEXPIRE when that created the key) for
// every key at once, one command per flush; on a cluster client, where a script touches one
// slot, one per key in one pipeline that the client splits by slot. A failed
// send puts the counts back into pending for the next tick. An entry is dropped a second
// after its window ends (its last count sent once more, best effort), when no decision can
// need it, so memory is bounded by the keys of the current window.
//
// # Precision
//
// Think of each request sent to Redis as taking the next position in the key's count. A
// request admitted synchronously took a position of at most Requests, and every position up
// to Requests belongs to an admitted request, so a window never admits fewer than Requests
// when demand exceeds it. The only requests admitted beyond Requests are local admissions
// that reached Redis after the last synchronous admission took its position (or never,
// when their sends failed until the window was over). A replica counts its unsent and
// in-flight admissions against H, so it admits at most H locally per key and window. With
// R replicas the exact ceiling is
//
//	admitted per key and window <= Requests + R×H    (≈ (R/2+1) × Requests)
//
// It is reached only if every replica spends its whole half locally before any of those
// counts reach Redis: a cold key hit hard on every replica within one SyncInterval, or sends
// held up while synchronous calls go through. Otherwise a replica's excess is what it
// admitted locally between its last send that landed before the limit was reached and the
// first answer that showed it the count at H or more: about two SyncIntervals and a round
// trip of its traffic on that key, capped at H. From that answer on the replica asks Redis
// for every request (or refuses it without asking once the count is past Requests), so near
// the limit the count is exact, and with Requests 1 nothing is local at all. A send that
// timed out after Redis applied it is sent again and counted twice, which errs towards
// refusing. All of this comes on top of what fixed windows allow anyway: up to twice the
// budget across a window boundary.
package ratelimit
