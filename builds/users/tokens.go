package users

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
)

// TokenPrefix is GitLab's prefix of personal access tokens: secret scanners recognise it,
// and the middleware knows which lookup a token needs.
const TokenPrefix = "glpat-"

// The scopes of a personal access token, GitLab's.
const (
	// ScopeAPI: the whole API, as the user.
	ScopeAPI = "api"
	// ScopeReadAPI: GET and HEAD requests only.
	ScopeReadAPI = "read_api"
	// ScopeCreateRunner: create runners (POST /user/runners).
	ScopeCreateRunner = "create_runner"
	// ScopeManageRunner: read, change and delete runners.
	ScopeManageRunner = "manage_runner"
	// ScopeAdminMode: an admin user's token acts as an admin only with it (GitLab's admin
	// mode); only admins' tokens may have it.
	ScopeAdminMode = "admin_mode"
)

// Scopes lists every scope a token may have.
var Scopes = []string{ScopeAPI, ScopeReadAPI, ScopeCreateRunner, ScopeManageRunner, ScopeAdminMode}

// DefaultRotationLifetime is how long a rotated token lives when the rotation names no
// expiry (GitLab's: a week).
const DefaultRotationLifetime = 7 * 24 * time.Hour

// Token is a personal access token, without its secret.
type Token struct {
	ID     int64
	UserID int64
	Name   string
	Scopes []string
	// ExpiresAt is a date (midnight UTC): the token stops working when that day begins,
	// as GitLab's do. nil: it does not expire.
	ExpiresAt  *time.Time
	Revoked    bool
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

// Expired reports whether the token's expiry has come at now.
func (t Token) Expired(now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}

// Active reports whether the token works at now (its user's state apart).
func (t Token) Active(now time.Time) bool { return !t.Revoked && !t.Expired(now) }

// CreatedToken is a token as its creation or rotation answers it: the one time its secret
// is shown.
type CreatedToken struct {
	Token
	Secret string
}

// NewToken is a token to create.
type NewToken struct {
	Name   string
	Scopes []string
	// ExpiresAt is truncated to its date (UTC); nil: the longest lifetime allowed
	// (Deps.MaxTokenLifetimeDays), or no expiry when there is no such bound.
	ExpiresAt *time.Time
}

// maxTokenLength bounds what is hashed and looked up: longer is no token of ours.
const maxTokenLength = 256

// Tokens are stored as their SHA-256 (secrettoken.Hash). A slow, salted hash is for
// passwords a person chose; these are 192 random bits (secrettoken.New), which no
// dictionary holds and no brute force over SHA-256 reaches, and an unsalted digest is what
// lets every request find its token with one index lookup.

func date(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func (s *Service) checkNewToken(u User, nt *NewToken, actor builds.Actor) error {
	if err := checkText("name", nt.Name, true); err != nil {
		return err
	}
	if len(nt.Scopes) == 0 {
		return invalid("scopes is missing: give one or more of %s", strings.Join(Scopes, ", "))
	}
	seen := map[string]bool{}
	var scopes []string
	for _, sc := range nt.Scopes {
		if !slices.Contains(Scopes, sc) {
			return invalid("scope %q is not one of %s", sc, strings.Join(Scopes, ", "))
		}
		if !seen[sc] {
			seen[sc] = true
			scopes = append(scopes, sc)
		}
	}
	nt.Scopes = scopes
	if seen[ScopeAdminMode] {
		if !u.IsAdmin {
			return invalid("scope admin_mode is for administrators' tokens only")
		}
		// A token without admin mode must not mint one that has it.
		if !actor.Admin {
			return invalid("only an administrator in admin mode may create a token with the admin_mode scope")
		}
	}
	today := date(s.now())
	if nt.ExpiresAt == nil && s.maxLifetimeDays > 0 {
		// GitLab's: a token asked for without an expiry gets the longest lifetime allowed.
		d := today.AddDate(0, 0, s.maxLifetimeDays)
		nt.ExpiresAt = &d
	}
	if nt.ExpiresAt != nil {
		d := date(*nt.ExpiresAt)
		if !d.After(today) {
			return invalid("expires_at must be a date after today")
		}
		if last := today.AddDate(0, 0, s.maxLifetimeDays); s.maxLifetimeDays > 0 && d.After(last) {
			return invalid("expires_at must be on or before %s: tokens live at most %d days (JOBAPI_MAX_TOKEN_LIFETIME_DAYS)",
				last.Format(time.DateOnly), s.maxLifetimeDays)
		}
		nt.ExpiresAt = &d
	}
	return nil
}

func (s *Service) tokenAudit(ctx context.Context, action string, t Token) {
	s.audit(ctx, action, t.UserID, map[string]any{"token_id": t.ID, "name": t.Name, "scopes": t.Scopes})
}

// CreateToken makes a token for a user: an admin's call for anyone, or a user's for itself
// (the handler decides who may). The answer holds the secret, never shown again.
func (s *Service) CreateToken(ctx context.Context, userID int64, nt NewToken) (CreatedToken, error) {
	u, err := s.store.User(ctx, userID)
	if err != nil {
		return CreatedToken{}, err
	}
	actor, _ := builds.ActorFrom(ctx)
	if err := s.checkNewToken(u, &nt, actor); err != nil {
		return CreatedToken{}, err
	}
	secret := secrettoken.New(TokenPrefix)
	t, err := s.store.CreateToken(ctx, Token{UserID: userID, Name: nt.Name, Scopes: nt.Scopes, ExpiresAt: nt.ExpiresAt,
		CreatedAt: s.now()}, secrettoken.Hash(secret))
	if err != nil {
		return CreatedToken{}, err
	}
	s.tokenAudit(ctx, "personal_access_token_created", t)
	return CreatedToken{Token: t, Secret: secret}, nil
}

// Tokens lists one page of tokens: of one user when userID is not 0, else all.
func (s *Service) Tokens(ctx context.Context, userID int64, page builds.Page) ([]Token, int, error) {
	return s.store.Tokens(ctx, userID, page)
}

// Token reads one token.
func (s *Service) Token(ctx context.Context, id int64) (Token, error) {
	return s.store.Token(ctx, id)
}

// RevokeToken revokes a token: the next request with it is refused, on every replica,
// since each request looks its token up.
func (s *Service) RevokeToken(ctx context.Context, id int64) error {
	t, err := s.store.Token(ctx, id)
	if err != nil {
		return err
	}
	if err := s.store.RevokeToken(ctx, id); err != nil {
		return err
	}
	s.tokenAudit(ctx, "personal_access_token_revoked", t)
	return nil
}

// RotateToken revokes an active token and makes its successor with the same name and
// scopes, expiring at expiresAt (nil: in DefaultRotationLifetime). A revoked or expired
// token cannot be rotated (a 400).
func (s *Service) RotateToken(ctx context.Context, id int64, expiresAt *time.Time) (CreatedToken, error) {
	t, err := s.store.Token(ctx, id)
	if err != nil {
		return CreatedToken{}, err
	}
	if t.Revoked {
		return CreatedToken{}, invalid("token %d is revoked: it cannot be rotated", id)
	}
	if t.Expired(s.now()) {
		return CreatedToken{}, invalid("token %d has expired: it cannot be rotated", id)
	}
	u, err := s.store.User(ctx, t.UserID)
	if err != nil {
		return CreatedToken{}, err
	}
	if expiresAt == nil {
		e := s.now().Add(DefaultRotationLifetime)
		expiresAt = &e
	}
	nt := NewToken{Name: t.Name, Scopes: t.Scopes, ExpiresAt: expiresAt}
	// The successor keeps admin_mode only when the rotating actor may grant it.
	actor, _ := builds.ActorFrom(ctx)
	if err := s.checkNewToken(u, &nt, actor); err != nil {
		return CreatedToken{}, err
	}
	secret := secrettoken.New(TokenPrefix)
	next, err := s.store.RotateToken(ctx, id, Token{UserID: t.UserID, Name: nt.Name, Scopes: nt.Scopes,
		ExpiresAt: nt.ExpiresAt, CreatedAt: s.now()}, secrettoken.Hash(secret))
	if err != nil {
		return CreatedToken{}, err
	}
	s.audit(ctx, "personal_access_token_rotated", t.UserID, map[string]any{"token_id": t.ID, "new_token_id": next.ID, "name": t.Name})
	return CreatedToken{Token: next, Secret: secret}, nil
}

// Refusal is why a credential was refused.
type Refusal int

const (
	// Unknown: no token of ours has that secret.
	Unknown Refusal = iota + 1
	Revoked
	Expired
	// Blocked: the user is blocked.
	Blocked
)

// AuthError refuses a credential (a 401, a 403 for a blocked user). UserID names the user
// when the credential was one of theirs (for the per-user failure budget), else 0.
type AuthError struct {
	Refusal Refusal
	UserID  int64
}

func (e *AuthError) Error() string {
	switch e.Refusal {
	case Revoked:
		return "token was revoked"
	case Expired:
		return "token has expired"
	case Blocked:
		return "user is blocked"
	}
	return "token is not valid"
}

// lastUsedEvery is how often a token's last_used_at is written: reads far more often than
// that would be a write per request for a column people read in days.
const lastUsedEvery = time.Minute

// TokenActor is who a personal access token acts as: its user, with the token's scopes,
// an admin only when the user is one and the token has admin_mode. A token unknown,
// revoked or expired, or its user blocked, is an *AuthError. The token is looked up in
// the store on every call: a revocation holds on every replica from the next request.
func (s *Service) TokenActor(ctx context.Context, token string) (builds.Actor, error) {
	if len(token) > maxTokenLength || !strings.HasPrefix(token, TokenPrefix) {
		return builds.Actor{}, &AuthError{Refusal: Unknown}
	}
	t, u, err := s.store.TokenByHash(ctx, secrettoken.Hash(token))
	if err != nil {
		if isNotFound(err) {
			return builds.Actor{}, &AuthError{Refusal: Unknown}
		}
		return builds.Actor{}, err
	}
	now := s.now()
	switch {
	case t.Revoked:
		return builds.Actor{}, &AuthError{Refusal: Revoked, UserID: u.ID}
	case t.Expired(now):
		return builds.Actor{}, &AuthError{Refusal: Expired, UserID: u.ID}
	case u.State != StateActive:
		return builds.Actor{}, &AuthError{Refusal: Blocked, UserID: u.ID}
	}
	if t.LastUsedAt == nil || now.Sub(*t.LastUsedAt) >= lastUsedEvery {
		// A bookkeeping write: when it fails (the row just deleted, a brief outage), the
		// request the token authenticated still goes on; the next use writes it.
		_ = s.store.TouchToken(ctx, t.ID, now)
	}
	return builds.Actor{Kind: builds.ActorUser, UserID: u.ID, Username: u.Username, Name: u.Name,
		Admin: u.IsAdmin && slices.Contains(t.Scopes, ScopeAdminMode), Scopes: slices.Clone(t.Scopes),
		Via: fmt.Sprintf("token #%d", t.ID)}, nil
}

// SessionActor is who a web session of user id acts as: the user without scope limits,
// an admin when the user is one and the session was started in admin mode. A user deleted
// since is builds.ErrNotFound, a blocked one an *AuthError: read with every request, so a
// block ends the user's sessions at once.
func (s *Service) SessionActor(ctx context.Context, userID int64, adminMode bool, via string) (builds.Actor, error) {
	u, err := s.store.User(ctx, userID)
	if err != nil {
		return builds.Actor{}, err
	}
	if u.State != StateActive {
		return builds.Actor{}, &AuthError{Refusal: Blocked, UserID: u.ID}
	}
	return builds.Actor{Kind: builds.ActorUser, UserID: u.ID, Username: u.Username, Name: u.Name,
		Admin: u.IsAdmin && adminMode, Via: via}, nil
}

// TokenBySecret reads the token whose secret is token (GET /personal_access_tokens/self).
func (s *Service) TokenBySecret(ctx context.Context, token string) (Token, error) {
	if len(token) > maxTokenLength {
		return Token{}, fmt.Errorf("personal access token: %w", builds.ErrNotFound)
	}
	t, _, err := s.store.TokenByHash(ctx, secrettoken.Hash(token))
	return t, err
}
