// Package oidclogin is the relying party of the web UI's single sign-in with OpenID Connect:
// the provider's discovery document and keys (go-oidc), the authorization code flow with
// PKCE, state and nonce (golang.org/x/oauth2), the ID token checked for issuer, audience,
// expiry and signature, and the claims a jobapi user is made from.
//
// It holds no state between the two legs of a sign-in: Begin returns a Pending that the
// caller keeps (the web UI in a signed, short-lived cookie) and hands back to Finish with
// the provider's callback. So every replica can finish a sign-in another one began.
package oidclogin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Config is the provider and the client jobapi is registered as there.
type Config struct {
	// IssuerURL is the provider's issuer; its discovery document is read from
	// IssuerURL + "/.well-known/openid-configuration" and must name the same issuer.
	IssuerURL    string
	ClientID     string
	ClientSecret string
	// RedirectURL is jobapi's callback as registered at the provider
	// (https://jobapi.example/oidc/callback).
	RedirectURL string
	// UsernameClaim names the claim a new user's username is taken from
	// (default preferred_username).
	UsernameClaim string
	// GroupsClaim and RequiredGroup limit sign-in to the members of one group: the claim
	// (default groups) must hold RequiredGroup, as a string or in a list of strings.
	// RequiredGroup "" lets every account of the provider in.
	GroupsClaim   string
	RequiredGroup string
	// HTTPClient talks to the provider (nil: a client with a 10 s timeout).
	HTTPClient *http.Client
	// Now is the clock the ID token's expiry is checked against (nil: time.Now).
	Now func() time.Time
}

// Enabled reports whether single sign-in is configured.
func (c Config) Enabled() bool { return c.IssuerURL != "" }

// Check reports a configuration that cannot work, before the first sign-in finds out.
func (c Config) Check() error {
	if !c.Enabled() {
		return nil
	}
	var missing []string
	for name, v := range map[string]string{"client id": c.ClientID, "client secret": c.ClientSecret, "redirect URL": c.RedirectURL} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("OpenID Connect issuer set without its %s", strings.Join(missing, ", "))
	}
	for name, raw := range map[string]string{"issuer URL": c.IssuerURL, "redirect URL": c.RedirectURL} {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("OpenID Connect %s %q is not an http(s) URL", name, raw)
		}
	}
	return nil
}

// Identity is who the provider says signed in.
type Identity struct {
	// Issuer and Subject name the account for good: a user renamed at the provider keeps
	// them, so jobapi keys its users' identities on them, never on the username.
	Issuer  string
	Subject string
	// Username is the UsernameClaim's value; Name and Email as the provider has them
	// ("" when it sent none).
	Username string
	Name     string
	Email    string
	Groups   []string
}

// Pending is the first leg of a sign-in, kept by the caller until the provider calls back.
// Every field is a secret of this browser's sign-in: keep it where only this browser and
// jobapi can read it, and only for a few minutes.
type Pending struct {
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"`
	// Next is where the browser goes once signed in.
	Next string `json:"next"`
}

// Errors Finish returns; each wraps the cause for the log.
var (
	// ErrUnavailable: the provider could not be reached or answered with a server error;
	// a later try may work.
	ErrUnavailable = errors.New("the sign-in provider is unavailable")
	// ErrStateMismatch: the callback is not the answer to this browser's sign-in (a forged
	// or replayed callback, or a sign-in begun in another tab).
	ErrStateMismatch = errors.New("the sign-in answer does not belong to this browser's sign-in")
	// ErrRefused: the provider refused the sign-in (the callback's error parameter, or a
	// code it would not exchange).
	ErrRefused = errors.New("the sign-in provider refused the sign-in")
	// ErrInvalidToken: the ID token failed a check (signature, issuer, audience, expiry,
	// nonce, access token hash).
	ErrInvalidToken = errors.New("the sign-in provider's ID token is not valid")
	// ErrMissingClaim: the token lacks the claim a username is taken from.
	ErrMissingClaim = errors.New("the sign-in provider sent no username")
	// ErrNotInGroup: the account is not a member of the required group.
	ErrNotInGroup = errors.New("the account is not in the group allowed to sign in")
)

// RP is the relying party of one provider. Discovery happens on first use and is retried
// on every sign-in until it succeeds, so jobapi starts while the provider is down.
type RP struct {
	cfg Config

	mu       sync.Mutex
	provider *oidc.Provider
}

// New returns the relying party for cfg.
func New(cfg Config) *RP {
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "preferred_username"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &RP{cfg: cfg}
}

// ProviderName is a short name of the provider for the "Sign in with …" button: the
// issuer's host.
func (rp *RP) ProviderName() string {
	if u, err := url.Parse(rp.cfg.IssuerURL); err == nil && u.Host != "" {
		return u.Host
	}
	return rp.cfg.IssuerURL
}

func (rp *RP) ctx(ctx context.Context) context.Context {
	ctx = oidc.ClientContext(ctx, rp.cfg.HTTPClient)
	return context.WithValue(ctx, oauth2.HTTPClient, rp.cfg.HTTPClient)
}

// discover returns the provider, reading its discovery document the first time.
func (rp *RP) discover(ctx context.Context) (*oidc.Provider, error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.provider != nil {
		return rp.provider, nil
	}
	// The key set go-oidc builds here keeps the HTTP client but not ctx's deadline, and
	// refetches the keys when a token names a key it does not know (key rotation).
	p, err := oidc.NewProvider(rp.ctx(ctx), rp.cfg.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: discovery at %s: %w", ErrUnavailable, rp.cfg.IssuerURL, err)
	}
	rp.provider = p
	return p, nil
}

func (rp *RP) oauth2Config(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: rp.cfg.ClientID, ClientSecret: rp.cfg.ClientSecret,
		RedirectURL: rp.cfg.RedirectURL, Endpoint: p.Endpoint(),
		Scopes: []string{oidc.ScopeOpenID, "profile", "email"}}
}

// Begin starts a sign-in: the URL to send the browser to, and the Pending to keep until
// the provider calls back. next is where the browser goes once signed in.
func (rp *RP) Begin(ctx context.Context, next string) (string, Pending, error) {
	p, err := rp.discover(ctx)
	if err != nil {
		return "", Pending{}, err
	}
	pending := Pending{State: randomString(), Nonce: randomString(), Verifier: oauth2.GenerateVerifier(), Next: next}
	authURL := rp.oauth2Config(p).AuthCodeURL(pending.State, oidc.Nonce(pending.Nonce),
		oauth2.S256ChallengeOption(pending.Verifier))
	return authURL, pending, nil
}

// Finish checks the provider's callback (its query) against pending, exchanges the code
// with the PKCE verifier, verifies the ID token and returns who signed in.
func (rp *RP) Finish(ctx context.Context, pending Pending, callback url.Values) (Identity, error) {
	// The state first: until it matches, nothing in the callback is this browser's.
	if state := callback.Get("state"); pending.State == "" || subtle.ConstantTimeCompare([]byte(state), []byte(pending.State)) != 1 {
		return Identity{}, ErrStateMismatch
	}
	if e := callback.Get("error"); e != "" {
		return Identity{}, fmt.Errorf("%w: %s %s", ErrRefused, e, callback.Get("error_description"))
	}
	code := callback.Get("code")
	if code == "" {
		return Identity{}, fmt.Errorf("%w: the callback carries no code", ErrRefused)
	}
	p, err := rp.discover(ctx)
	if err != nil {
		return Identity{}, err
	}
	ctx = rp.ctx(ctx)
	oc := rp.oauth2Config(p)
	token, err := oc.Exchange(ctx, code, oauth2.VerifierOption(pending.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode < 500 {
			return Identity{}, fmt.Errorf("%w: code exchange: %w", ErrRefused, err)
		}
		return Identity{}, fmt.Errorf("%w: code exchange: %w", ErrUnavailable, err)
	}
	rawID, _ := token.Extra("id_token").(string)
	if rawID == "" {
		return Identity{}, fmt.Errorf("%w: the token response carries no id_token", ErrInvalidToken)
	}
	verifier := p.Verifier(&oidc.Config{ClientID: rp.cfg.ClientID, Now: rp.cfg.Now})
	idToken, err := verifier.Verify(ctx, rawID)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(idToken.Nonce), []byte(pending.Nonce)) != 1 {
		return Identity{}, fmt.Errorf("%w: nonce does not match this sign-in's", ErrInvalidToken)
	}
	if idToken.AccessTokenHash != "" {
		if err := idToken.VerifyAccessToken(token.AccessToken); err != nil {
			return Identity{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
		}
	}
	claims := map[string]any{}
	if err := idToken.Claims(&claims); err != nil {
		return Identity{}, fmt.Errorf("%w: claims: %w", ErrInvalidToken, err)
	}
	// Providers that follow OpenID Connect Core §5.4 to the letter leave the profile
	// claims out of the ID token when they issue an access token: ask the userinfo
	// endpoint for what is missing (never letting it change the subject).
	if missingAny(claims, rp.cfg.UsernameClaim, "name", "email", rp.groupsClaimIfRequired()) && p.UserInfoEndpoint() != "" {
		info, err := p.UserInfo(ctx, oauth2.StaticTokenSource(token))
		if err != nil {
			return Identity{}, fmt.Errorf("%w: userinfo: %w", ErrUnavailable, err)
		}
		if info.Subject != idToken.Subject {
			return Identity{}, fmt.Errorf("%w: userinfo names subject %q, the ID token %q", ErrInvalidToken, info.Subject, idToken.Subject)
		}
		more := map[string]any{}
		if err := info.Claims(&more); err != nil {
			return Identity{}, fmt.Errorf("%w: userinfo claims: %w", ErrInvalidToken, err)
		}
		for k, v := range more {
			if _, ok := claims[k]; !ok {
				claims[k] = v
			}
		}
	}
	id := Identity{Issuer: idToken.Issuer, Subject: idToken.Subject,
		Username: stringClaim(claims, rp.cfg.UsernameClaim), Name: stringClaim(claims, "name"),
		Email: stringClaim(claims, "email"), Groups: stringsClaim(claims, rp.cfg.GroupsClaim)}
	if rp.cfg.RequiredGroup != "" && !slices.Contains(id.Groups, rp.cfg.RequiredGroup) {
		return id, fmt.Errorf("%w: %q is not in the %s claim", ErrNotInGroup, rp.cfg.RequiredGroup, rp.cfg.GroupsClaim)
	}
	if id.Username == "" {
		return id, fmt.Errorf("%w: no %s claim", ErrMissingClaim, rp.cfg.UsernameClaim)
	}
	return id, nil
}

// RequiredGroup is the group sign-in is limited to ("" for none) and the claim it is read
// from, for the page that explains a refusal.
func (rp *RP) RequiredGroup() (claim, group string) {
	return rp.cfg.GroupsClaim, rp.cfg.RequiredGroup
}

func (rp *RP) groupsClaimIfRequired() string {
	if rp.cfg.RequiredGroup == "" {
		return ""
	}
	return rp.cfg.GroupsClaim
}

func missingAny(claims map[string]any, names ...string) bool {
	for _, n := range names {
		if n == "" {
			continue
		}
		if _, ok := claims[n]; !ok {
			return true
		}
	}
	return false
}

func stringClaim(claims map[string]any, name string) string {
	s, _ := claims[name].(string)
	return strings.TrimSpace(s)
}

// stringsClaim reads a claim that is a list of strings or one string.
func stringsClaim(claims map[string]any, name string) []string {
	switch v := claims[name].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func randomString() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
