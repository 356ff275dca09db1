// Package tokenguard checks the admin token in constant time and throttles the guessing of
// every token the API and the web sign-in take (the admin token and personal access tokens
// count against budgets of failures per client address, per user and for everyone). It
// knows nothing of builds: handlers, the web UI and builds/users share the one guard that
// server wires to the rate limiter.
package tokenguard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
	"time"
)

// MinAdminTokenLength is the shortest admin (and runner registration) token jobapi serve
// accepts: the admin token is the bootstrap credential, and the guard below only slows a
// guesser down.
const MinAdminTokenLength = 16

// FailureLimiter counts failed token attempts per key in fixed windows shared by every
// replica (ratelimit.Limiter through an adapter).
type FailureLimiter interface {
	// Exceeded reports, without counting, whether key's failures reached limit in the
	// current window, and the time until it ends.
	Exceeded(scope, key string, limit int, window time.Duration) (bool, time.Duration)
	// Fail counts one failure; allowed is false once the window holds more than limit.
	// An error (Redis down) comes with allowed true: failures then go uncounted.
	Fail(ctx context.Context, scope, key string, limit int, window time.Duration) (allowed bool, retryAfter time.Duration, err error)
}

// AdminCheck is the outcome of presenting the admin token.
type AdminCheck int

const (
	AdminWrong     AdminCheck = iota // no token or another one
	AdminOK                          // the admin token
	AdminThrottled                   // too many failures: not compared at all; answer 429
)

// Default budgets of failed token attempts per minute: per client address, for everyone
// together as a backstop against guessing from many addresses, and per user for the
// failures of a user's own tokens (revoked, expired: someone holding an old token).
const (
	DefaultAdminFailuresPerClient = 10
	DefaultAdminFailuresGlobal    = 300
	DefaultTokenFailuresPerUser   = 10
)

// AdminGuard checks the admin token (the operator API's PRIVATE-TOKEN and the web
// sign-in) in constant time and throttles guessing of every token the API and the web
// sign-in take (the admin token and personal access tokens count against one budget,
// whichever door a guesser knocks on). Once a client address has spent its budget of
// failures for the minute, its attempts are refused without comparing, right token or
// not: otherwise a guesser would still learn which guess is right. Others, the operator's
// address among them, keep working until the global budget is spent too. Successful
// attempts are never counted, so busy scripts with the right token are not limited by
// this at all.
type AdminGuard struct {
	hash    [sha256.Size]byte
	set     bool
	limiter FailureLimiter
	// PerClient, Global and PerUser are failures per minute (0: that budget is off).
	PerClient, Global, PerUser int
}

// NewAdminGuard guards token; limiter nil checks without throttling.
func NewAdminGuard(token string, limiter FailureLimiter) *AdminGuard {
	return &AdminGuard{hash: sha256.Sum256([]byte(token)), set: token != "", limiter: limiter,
		PerClient: DefaultAdminFailuresPerClient, Global: DefaultAdminFailuresGlobal, PerUser: DefaultTokenFailuresPerUser}
}

const (
	adminFailureScope       = "admin_token_failure"
	adminFailureGlobalScope = "admin_token_failure_all"
	adminFailureGlobalKey   = "all"
	userFailureScope        = "token_failure_user"
)

// Check compares token with the admin token for a request from client (its address).
// retryAfter is set with AdminThrottled.
func (g *AdminGuard) Check(ctx context.Context, client, token string) (AdminCheck, time.Duration) {
	if over, retry := g.Throttled(client); over {
		return AdminThrottled, retry
	}
	if g.Matches(token) {
		return AdminOK, 0
	}
	if over, retry := g.Fail(ctx, client); over {
		return AdminThrottled, retry
	}
	return AdminWrong, 0
}

// Throttled reports, without counting, whether client (or everyone) has spent the budget
// of failures: its next attempt is refused without looking at the token.
func (g *AdminGuard) Throttled(client string) (bool, time.Duration) {
	if g.limiter == nil {
		return false, 0
	}
	if over, retry := g.limiter.Exceeded(adminFailureScope, client, g.PerClient, time.Minute); over && g.PerClient > 0 {
		return true, retry
	}
	if over, retry := g.limiter.Exceeded(adminFailureGlobalScope, adminFailureGlobalKey, g.Global, time.Minute); over && g.Global > 0 {
		return true, retry
	}
	return false, 0
}

// Fail counts a wrong token from client; over is true once this failure passed a budget.
// A limiter error (Redis down) leaves the failure uncounted.
func (g *AdminGuard) Fail(ctx context.Context, client string) (over bool, retryAfter time.Duration) {
	if g.limiter == nil {
		return false, 0
	}
	if g.PerClient > 0 {
		if ok, r, _ := g.limiter.Fail(ctx, adminFailureScope, client, g.PerClient, time.Minute); !ok {
			over, retryAfter = true, r
		}
	}
	if g.Global > 0 {
		if ok, r, _ := g.limiter.Fail(ctx, adminFailureGlobalScope, adminFailureGlobalKey, g.Global, time.Minute); !ok {
			over, retryAfter = true, max(retryAfter, r)
		}
	}
	return over, retryAfter
}

// FailUser counts a refused token of user id (revoked, expired, its user blocked) against
// the user's own budget; over is true once past it. Only failing attempts are answered
// 429 for it: a valid token of the user is never refused by this budget, so an old token
// in someone else's hands cannot lock its owner out.
func (g *AdminGuard) FailUser(ctx context.Context, id int64) (over bool, retryAfter time.Duration) {
	if g.limiter == nil || g.PerUser <= 0 {
		return false, 0
	}
	ok, r, _ := g.limiter.Fail(ctx, userFailureScope, strconv.FormatInt(id, 10), g.PerUser, time.Minute)
	return !ok, r
}

// Matches compares token with the admin token in constant time, without counting
// anything (for answers that only add detail, such as readiness's message).
func (g *AdminGuard) Matches(token string) bool {
	h := sha256.Sum256([]byte(token))
	return g.set && token != "" && subtle.ConstantTimeCompare(h[:], g.hash[:]) == 1
}
