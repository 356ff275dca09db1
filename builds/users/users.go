// Package users holds jobapi's people and their personal access tokens (GitLab's /users,
// /user and /personal_access_tokens), and turns a presented token into the builds.Actor
// that permission checks and the audit log name.
//
// The admin token (JOBAPI_ADMIN_TOKEN) stays outside this package: it is the bootstrap
// credential that creates the first users, and it is checked by tokenguard.AdminGuard.
package users

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobapi/jobapi/builds"
)

// State is a user's state, GitLab's: an active user's tokens and sessions work, a blocked
// user's do not (and start working again once the user is unblocked).
type State string

const (
	StateActive  State = "active"
	StateBlocked State = "blocked"
)

// User is a person on jobapi.
type User struct {
	ID       int64
	Username string
	Name     string
	Email    string
	State    State
	// IsAdmin may act on the instance: with a web session, or a token that has the
	// admin_mode scope (GitLab's admin mode).
	IsAdmin   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NewUser is a user to create.
type NewUser struct {
	Username string
	Name     string
	Email    string
	IsAdmin  bool
}

// UserChange is what an admin changes on a user; nil fields are kept.
type UserChange struct {
	Username *string
	Name     *string
	Email    *string
	IsAdmin  *bool
	State    *State
}

// UserFilter narrows a list of users (GitLab's GET /users?username=&search=&active=&blocked=).
type UserFilter struct {
	// Username matches exactly, case-insensitively ("": any).
	Username string
	// Search matches a part of the username, name or email, case-insensitively.
	Search string
	// State: "" for any.
	State State
}

// TakenError: the username or email is another user's (GitLab's 409).
type TakenError struct{ Field string }

func (e *TakenError) Error() string { return e.Field + " has already been taken" }

// Store keeps users and their tokens. Methods that name a user or a token return
// builds.ErrNotFound when it does not exist, and *TakenError for a duplicate username or
// email.
type Store interface {
	CreateUser(ctx context.Context, u NewUser, now time.Time) (User, error)
	// Users lists one page of users, oldest first, and their total.
	Users(ctx context.Context, f UserFilter, page builds.Page) ([]User, int, error)
	User(ctx context.Context, id int64) (User, error)
	UpdateUser(ctx context.Context, id int64, c UserChange, now time.Time) (User, error)
	// DeleteUser removes a user and its tokens.
	DeleteUser(ctx context.Context, id int64) error

	CreateToken(ctx context.Context, t Token, hash []byte) (Token, error)
	// Tokens lists one page of tokens (of one user when userID is not 0), oldest first.
	Tokens(ctx context.Context, userID int64, page builds.Page) ([]Token, int, error)
	Token(ctx context.Context, id int64) (Token, error)
	// RevokeToken marks an unrevoked token revoked; builds.ErrNotFound when there is no
	// such token or it was revoked already.
	RevokeToken(ctx context.Context, id int64) error
	// RotateToken revokes an active token and creates next, with hash, in one transaction;
	// builds.ErrNotFound when the token does not exist or was revoked already (so that two
	// rotations of one token never leave two successors).
	RotateToken(ctx context.Context, id int64, next Token, hash []byte) (Token, error)
	// TokenByHash finds a token, revoked or not, and its user.
	TokenByHash(ctx context.Context, hash []byte) (Token, User, error)
	// TouchToken records a token's use.
	TouchToken(ctx context.Context, id int64, at time.Time) error
}

// Service manages users and tokens.
type Service struct {
	store  Store
	builds *builds.Service // the audit log; nil records nothing
	now    func() time.Time
	// maxLifetimeDays is Deps.MaxTokenLifetimeDays.
	maxLifetimeDays int
}

// Deps are what the service is built from.
type Deps struct {
	Store Store
	// Builds records admin actions in the audit log (nil: not recorded).
	Builds *builds.Service
	Now    func() time.Time
	// MaxTokenLifetimeDays bounds a token's expires_at, counted from today, and is the
	// lifetime of one created without it (GitLab's maximum allowable lifetime, 365 days by
	// default). 0: no bound, and a token without expires_at never expires.
	MaxTokenLifetimeDays int
}

// New returns the service.
func New(d Deps) *Service {
	if d.Store == nil {
		panic("users.New: Store is required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.MaxTokenLifetimeDays < 0 {
		panic("users.New: MaxTokenLifetimeDays is negative")
	}
	return &Service{store: d.Store, builds: d.Builds, now: d.Now, maxLifetimeDays: d.MaxTokenLifetimeDays}
}

// GitLab's username rule: letters, digits, "_", "-" and "." only, not starting with "-"
// nor ending with ".", ".git" or ".atom".
var usernamePattern = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.\-]*$`)

const maxField = 255

// reservedUsername names the admin token in the audit log: no user may look like it.
const reservedUsername = "admin"

func invalid(format string, args ...any) error {
	return &builds.ValidationError{Msg: fmt.Sprintf(format, args...)}
}

func checkText(field, v string, required bool) error {
	switch {
	case required && strings.TrimSpace(v) == "":
		return invalid("%s is missing", field)
	case !utf8.ValidString(v) || strings.ContainsAny(v, "\x00\r\n"):
		return invalid("%s must be one line of UTF-8 text", field)
	case utf8.RuneCountInString(v) > maxField:
		return invalid("%s is longer than %d characters", field, maxField)
	}
	return nil
}

func checkUsername(v string) error {
	if err := checkText("username", v, true); err != nil {
		return err
	}
	if !usernamePattern.MatchString(v) || strings.HasSuffix(v, ".") || strings.HasSuffix(v, ".git") || strings.HasSuffix(v, ".atom") {
		return invalid("username may hold letters, digits, '_', '-' and '.' only, may not start with '-' nor end with '.', '.git' or '.atom'")
	}
	if strings.EqualFold(v, reservedUsername) {
		return invalid("username %q is reserved for the admin token", reservedUsername)
	}
	return nil
}

func checkEmail(v string) error {
	if err := checkText("email", v, true); err != nil {
		return err
	}
	at := strings.LastIndexByte(v, '@')
	if at < 1 || at == len(v)-1 || strings.ContainsAny(v, " \t<>") {
		return invalid("email %q is not an email address", v)
	}
	return nil
}

func userTarget(id int64) string { return fmt.Sprintf("user %d", id) }

func (s *Service) audit(ctx context.Context, action string, id int64, detail map[string]any) {
	if s.builds == nil {
		return
	}
	if _, ok := builds.ActorFrom(ctx); !ok {
		// A change no caller asked for (a user created on a first single sign-on, before
		// anyone is signed in): the audit names the machinery.
		ctx = builds.WithActor(ctx, builds.Actor{Kind: builds.ActorSystem})
	}
	s.builds.RecordAudit(ctx, action, userTarget(id), detail)
}

// CreateUser makes a user (an admin's call).
func (s *Service) CreateUser(ctx context.Context, u NewUser) (User, error) {
	if err := checkUsername(u.Username); err != nil {
		return User{}, err
	}
	if err := checkText("name", u.Name, true); err != nil {
		return User{}, err
	}
	if err := checkEmail(u.Email); err != nil {
		return User{}, err
	}
	created, err := s.store.CreateUser(ctx, u, s.now())
	if err != nil {
		return User{}, err
	}
	s.audit(ctx, "user_created", created.ID, map[string]any{"username": created.Username, "is_admin": created.IsAdmin})
	return created, nil
}

// Users lists one page of users.
func (s *Service) Users(ctx context.Context, f UserFilter, page builds.Page) ([]User, int, error) {
	return s.store.Users(ctx, f, page)
}

// User reads one user.
func (s *Service) User(ctx context.Context, id int64) (User, error) {
	return s.store.User(ctx, id)
}

// UpdateUser changes a user (an admin's call). Blocking a user stops its tokens and
// sessions at once, on every replica: they read the user with every request.
func (s *Service) UpdateUser(ctx context.Context, id int64, c UserChange) (User, error) {
	if c.Username != nil {
		if err := checkUsername(*c.Username); err != nil {
			return User{}, err
		}
	}
	if c.Name != nil {
		if err := checkText("name", *c.Name, true); err != nil {
			return User{}, err
		}
	}
	if c.Email != nil {
		if err := checkEmail(*c.Email); err != nil {
			return User{}, err
		}
	}
	if c.State != nil && *c.State != StateActive && *c.State != StateBlocked {
		return User{}, invalid("state must be active or blocked")
	}
	u, err := s.store.UpdateUser(ctx, id, c, s.now())
	if err != nil {
		return User{}, err
	}
	detail := map[string]any{"username": u.Username, "state": string(u.State), "is_admin": u.IsAdmin}
	s.audit(ctx, "user_updated", id, detail)
	return u, nil
}

// DeleteUser removes a user and its tokens, which stop working at once.
func (s *Service) DeleteUser(ctx context.Context, id int64) error {
	if err := s.store.DeleteUser(ctx, id); err != nil {
		return err
	}
	s.audit(ctx, "user_deleted", id, nil)
	return nil
}

// ErrSelfOnly: a call only a user may make for itself (the admin token has no user).
var ErrSelfOnly = errors.New("only a user may do this for itself; the admin token has no user")

func isNotFound(err error) bool { return errors.Is(err, builds.ErrNotFound) }

// Now is the service's clock: whether a token is active is read against it.
func (s *Service) Now() time.Time { return s.now() }
