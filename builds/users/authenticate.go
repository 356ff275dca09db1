package users

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/tokenguard"
)

// ThrottledError: the client (or the user whose token it presented) has spent its budget
// of refused tokens; answered 429 with Retry-After.
type ThrottledError struct {
	RetryAfter time.Duration
	// PerUser: the user's budget, not the address's.
	PerUser bool
}

func (e *ThrottledError) Error() string {
	if e.PerUser {
		return "too many refused tokens of this user"
	}
	return "too many wrong tokens from this address"
}

// Authenticator resolves a presented token, on the API or the web sign-in, into the
// caller: the admin token (the bootstrap credential) or a personal access token. Refused
// tokens of any kind spend the guard's budgets, so guessing is throttled whichever kind of
// token is guessed and whichever door it is tried at.
type Authenticator struct {
	Guard *tokenguard.AdminGuard
	// Users nil: only the admin token authenticates.
	Users *Service
}

// Resolve returns who token belongs to, for a request from client (its address). The
// admin token's actor says it came through adminVia. A refused token is an *AuthError, a
// spent budget a *ThrottledError; any other error is a backend's, which counts nothing.
func (a Authenticator) Resolve(ctx context.Context, client, token, adminVia string) (builds.Actor, error) {
	if over, retry := a.Guard.Throttled(client); over {
		return builds.Actor{}, &ThrottledError{RetryAfter: retry}
	}
	if a.Guard.Matches(token) {
		return builds.Actor{Kind: builds.ActorAdminToken, Username: builds.AdminUsername, Admin: true, Via: adminVia}, nil
	}
	refused := &AuthError{Refusal: Unknown}
	if a.Users != nil && strings.HasPrefix(token, TokenPrefix) {
		actor, err := a.Users.TokenActor(ctx, token)
		if err == nil {
			return actor, nil
		}
		if !errors.As(err, &refused) {
			return builds.Actor{}, err
		}
		if refused.UserID != 0 {
			if over, retry := a.Guard.FailUser(ctx, refused.UserID); over {
				return builds.Actor{}, &ThrottledError{RetryAfter: retry, PerUser: true}
			}
		}
	}
	if over, retry := a.Guard.Fail(ctx, client); over {
		return builds.Actor{}, &ThrottledError{RetryAfter: retry}
	}
	return builds.Actor{}, refused
}
