package users

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Identity is an account at an OpenID Provider as its ID token names it.
type Identity struct {
	// Issuer and Subject name the account for good (a rename at the provider keeps them).
	Issuer, Subject string
	// Username, Name and Email are the claims a new user is made from ("" when absent).
	Username, Name, Email string
}

// IdentityStore links provider accounts to users. The Store implements it when single
// sign-on is available.
type IdentityStore interface {
	// UserByIdentity returns the user linked to the account; builds.ErrNotFound for none.
	UserByIdentity(ctx context.Context, issuer, subject string) (User, error)
	// CreateUserWithIdentity creates u linked to the account in one transaction;
	// *TakenError for a taken username or email, builds.ErrExists when the account was
	// linked meanwhile.
	CreateUserWithIdentity(ctx context.Context, u NewUser, issuer, subject string, now time.Time) (User, error)
}

// ErrEmailTaken: the account's email is another jobapi user's. Single sign-on never links
// an existing user by email (whoever controls an account at the provider would take over
// that user); an administrator changes the email of one of them.
var ErrEmailTaken = errors.New("the account's email belongs to another jobapi user")

var notUsername = regexp.MustCompile(`[^A-Za-z0-9_.\-]+`)

// SignInWithIdentity returns the user linked to the provider's account, creating it (not
// an administrator) on the account's first sign-in from its claims: the username claim
// made into a GitLab username, with a number added when another user has it. A blocked
// user is refused (*AuthError, Blocked). Nothing is created on any error.
func (s *Service) SignInWithIdentity(ctx context.Context, id Identity) (User, error) {
	ids, ok := s.store.(IdentityStore)
	if !ok {
		return User{}, fmt.Errorf("single sign-on: %w", builds.ErrUnavailable)
	}
	if id.Issuer == "" || id.Subject == "" {
		return User{}, invalid("the identity has no issuer or subject")
	}
	for attempt := 0; attempt < 2; attempt++ {
		u, err := ids.UserByIdentity(ctx, id.Issuer, id.Subject)
		if err == nil {
			if u.State != StateActive {
				return User{}, &AuthError{Refusal: Blocked, UserID: u.ID}
			}
			return u, nil
		}
		if !errors.Is(err, builds.ErrNotFound) {
			return User{}, err
		}
		u, err = s.createFromIdentity(ctx, ids, id)
		if errors.Is(err, builds.ErrExists) {
			continue // a concurrent first sign-in of the same account linked it: read it
		}
		return u, err
	}
	return User{}, fmt.Errorf("identity %s of %s: %w", id.Subject, id.Issuer, builds.ErrContention)
}

func (s *Service) createFromIdentity(ctx context.Context, ids IdentityStore, id Identity) (User, error) {
	base := strings.Trim(notUsername.ReplaceAllString(id.Username, "_"), ".-")
	if base == "" || strings.EqualFold(base, reservedUsername) {
		base = "user"
	}
	base = base[:min(len(base), 60)]
	name := strings.TrimSpace(id.Name)
	if name == "" {
		name = id.Username
	}
	email := strings.TrimSpace(id.Email)
	if checkEmail(email) != nil {
		// No usable email claim: a placeholder that is unique and routes nowhere.
		email = base + "+" + strconv.FormatInt(time.Now().UnixNano(), 36) + "@sso.invalid"
	}
	for n := 0; n < 20; n++ {
		username := base
		if n > 0 {
			username = base + strconv.Itoa(n+1)
		}
		if err := checkUsername(username); err != nil {
			return User{}, err
		}
		created, err := ids.CreateUserWithIdentity(ctx, NewUser{Username: username, Name: name, Email: email}, id.Issuer, id.Subject, s.now())
		var te *TakenError
		switch {
		case errors.As(err, &te) && te.Field == "Username":
			continue
		case errors.As(err, &te):
			return User{}, ErrEmailTaken
		case err != nil:
			return User{}, err
		}
		s.audit(ctx, "user_created", created.ID, map[string]any{"username": created.Username, "is_admin": false,
			"identity_issuer": id.Issuer})
		return created, nil
	}
	return User{}, &TakenError{Field: "Username"}
}
