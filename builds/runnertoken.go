package builds

import (
	"time"

	"github.com/jobapi/jobapi/secrettoken"
)

// Runner tokens expire when JOBAPI_RUNNER_TOKEN_EXPIRES_IN is set (Config.RunnerTokenExpiresIn),
// as GitLab's "runners expiration" setting does: every token issued from then on (created,
// registered, reset) carries an expiry, the runner learns it from POST /runners,
// /runners/verify and the reset answers, and gitlab-runner's run command resets its token
// itself at 75 % of the lifetime (commands/multi.go resetOneRunnerToken). An expired token
// is refused like an unknown one. A token issued while expiry was off keeps no expiry.

// Token prefixes as GitLab issues them; gitlab-runner crashes on glrt- tokens under 14
// characters, ours have 5 + 32 (secrettoken.New). A runner registered with a registration
// token gets glrtr- tokens (GitLab's REGISTRATION_RUNNER_TOKEN_PREFIX): gitlab-runner treats
// only glrt- as a "created runner" token, so its unregister deletes such a runner instead of
// one manager.
const (
	RunnerTokenPrefix           = "glrt-"
	RegisteredRunnerTokenPrefix = "glrtr-"
	JobTokenPrefix              = "glcbt-"
)

// RunnerToken is a runner token as issued: shown once, with when it stops working.
type RunnerToken struct {
	Token string
	// ExpiresAt is nil when the token never expires.
	ExpiresAt *time.Time
}

// TokenRotation is a runner resetting its own token (POST /runners/reset_authentication_token):
// Presented is replaced by New. When Presented is the current token, it stays valid until
// PreviousUntil (nil: it stops at once) or its own expiry, whichever is first. When it is
// the previous token, still in its grace, the current one is dropped instead: the runner
// never received it (a lost answer), and the previous keeps its own deadline.
type TokenRotation struct {
	RunnerID      int64
	Presented     []byte
	New           []byte
	ExpiresAt     *time.Time
	PreviousUntil *time.Time
	Now           time.Time
}

// tokenPrefix is the prefix of the runner's tokens: glrtr- when it was registered with a
// registration token, as GitLab's prefix_for_new_and_legacy_runner.
func (r Runner) tokenPrefix() string {
	if r.RegistrationToken {
		return RegisteredRunnerTokenPrefix
	}
	return RunnerTokenPrefix
}

// NewRunnerToken issues a token for r with the configured lifetime. Expiries are whole
// seconds: they travel as RFC 3339 without a fraction.
func (s *Service) NewRunnerToken(r Runner) RunnerToken {
	t := RunnerToken{Token: secrettoken.New(r.tokenPrefix())}
	if s.cfg.RunnerTokenExpiresIn > 0 {
		at := s.now().Add(s.cfg.RunnerTokenExpiresIn).UTC().Truncate(time.Second)
		t.ExpiresAt = &at
	}
	return t
}

// tokenExpired reports whether a token expiring at (nil: never) is past it at now.
func tokenExpired(at *time.Time, now time.Time) bool {
	return at != nil && !now.Before(*at)
}
