// Package oidcprovider starts a real OpenID Provider for tests: zitadel/oidc's op package
// with the in-memory storage and password login page of its example server (a kept
// library, not a stub), serving discovery, JWKS, authorize, token and userinfo on a
// loopback port. Tests add users (with groups) and register jobapi as a client, then sign
// in through the provider's own login form, with a browser or an HTTP client.
//
// Faults a misbehaving or hostile provider would produce are switched on per provider:
// ID tokens already expired, signed with a key the provider does not publish, or carrying
// another sign-in's nonce. They change what the real provider issues; everything else
// (the flow, PKCE, the signature over a forged token) stays the library's.
package oidcprovider

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// User is an account at the provider.
type User struct {
	// Subject is the account's stable id (the ID token's sub).
	Subject  string
	Username string
	Password string
	// Name is split into the example storage's first and last name at the first space.
	Name   string
	Email  string
	Groups []string
}

// Fault makes the provider issue a bad ID token.
type Fault int

// The faults: each applies to every ID token issued while it is set.
const (
	NoFault Fault = iota
	// ExpiredIDToken: the ID token's exp is ten minutes in the past.
	ExpiredIDToken
	// ForgedSignature: the ID token is signed by a key that has the published key's id
	// but is not in the JWKS.
	ForgedSignature
	// WrongNonce: the ID token carries a nonce other than the one the client sent.
	WrongNonce
)

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is the provider's issuer URL (http://127.0.0.1:port).
	Issuer string

	store *store
}

// Start runs a provider until the test ends.
func Start(t testing.TB) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("oidcprovider: listen: %v", err)
	}
	issuer := "http://" + ln.Addr().String()
	users := &userStore{byID: map[string]*storage.User{}, groups: map[string][]string{}}
	st := &store{users: users, clients: map[string]*storage.Client{}, secrets: map[string]string{}}
	st.Storage = storage.NewStorageWithClients(users, map[string]*storage.Client{})
	forgery, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("oidcprovider: key: %v", err)
	}
	st.forgery = forgery
	srv := httptest.NewUnstartedServer(exampleop.SetupServer(issuer, st, nil, false))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &Provider{Issuer: issuer, store: st}
}

// AddClient registers a confidential web client (client_secret_basic) with its redirect
// URIs; http redirect URIs are allowed (the example's dev mode).
func (p *Provider) AddClient(id, secret string, redirectURIs ...string) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	p.store.clients[id] = storage.WebClient(id, secret, redirectURIs...)
	p.store.secrets[id] = secret
}

// AddUser adds an account, or replaces the one with the same Subject (a rename at the
// provider keeps the subject).
func (p *Provider) AddUser(u User) {
	first, last, _ := strings.Cut(u.Name, " ")
	p.store.users.put(&storage.User{ID: u.Subject, Username: u.Username, Password: u.Password,
		FirstName: first, LastName: last, Email: u.Email, EmailVerified: u.Email != ""}, u.Groups)
}

// SetFault makes every ID token issued from now on bad in the way f says.
func (p *Provider) SetFault(f Fault) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	p.store.fault = f
}

// ProfileInIDToken makes the provider put the profile and email claims in the ID token
// even though it issues an access token (as Keycloak, Dex and others do); off, they come
// from the userinfo endpoint only (OpenID Connect Core §5.4, zitadel's default).
func (p *Provider) ProfileInIDToken(on bool) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	p.store.profileInIDToken = on
}

// NewBrowser is an HTTP client with a cookie jar, as a browser would be, that follows
// redirects and keeps the session cookies jobapi sets.
func NewBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 20 * time.Second}
}

var hiddenID = regexp.MustCompile(`name="id" value="([^"]*)"`)

// LogIn drives a browser (NewBrowser) from start, a URL of the client that redirects to
// the provider, through the provider's login form with username and password, and stops
// at the redirect back to the client: it returns that callback URL (with code and state)
// without calling it, so that a test can call it as it is or tampered with.
func (p *Provider) LogIn(ctx context.Context, browser *http.Client, start, username, password string) (*url.URL, error) {
	issuer, _ := url.Parse(p.Issuer)
	var callback *url.URL
	stopAtClient := func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("too many redirects")
		}
		if req.URL.Host != issuer.Host && via[len(via)-1].URL.Host == issuer.Host {
			callback = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}
	c := *browser
	c.CheckRedirect = stopAtClient
	form, err := get(ctx, &c, start)
	if err != nil {
		return nil, err
	}
	if callback != nil {
		return callback, nil // the provider still knew this browser
	}
	m := hiddenID.FindStringSubmatch(form)
	if m == nil {
		return nil, fmt.Errorf("oidcprovider: no login form at the provider: %.300s", form)
	}
	login := p.Issuer + "/login/username"
	body := url.Values{"id": {html.UnescapeString(m[1])}, "username": {username}, "password": {password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, login, strings.NewReader(body.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if callback == nil {
		return nil, fmt.Errorf("oidcprovider: the login did not redirect back (%s): %.300s", resp.Status, page)
	}
	return callback, nil
}

func get(ctx context.Context, c *http.Client, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// store is the example server's storage with the parts a test needs changed: clients
// registered after start, groups in the ID token and userinfo, and the faults.
type store struct {
	*storage.Storage
	users   *userStore
	forgery *rsa.PrivateKey

	mu               sync.Mutex
	clients          map[string]*storage.Client
	secrets          map[string]string
	fault            Fault
	profileInIDToken bool
}

func (s *store) currentFault() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fault
}

func (s *store) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok {
		return nil, errors.New("client not found")
	}
	return client{Client: storage.RedirectGlobsClient(c), fault: s.fault, profile: s.profileInIDToken}, nil
}

func (s *store) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if want, ok := s.secrets[id]; !ok || want != secret {
		return errors.New("invalid client")
	}
	return nil
}

// SigningKey signs with the forgery (same key id, other key) under ForgedSignature; the
// JWKS (KeySet) still publishes the real key only.
func (s *store) SigningKey(ctx context.Context) (op.SigningKey, error) {
	published, err := s.Storage.SigningKey(ctx)
	if err != nil || s.currentFault() != ForgedSignature {
		return published, err
	}
	return forgedKey{id: published.ID(), key: s.forgery}, nil
}

// AuthRequestByCode hands the token endpoint a request whose nonce is not the client's
// under WrongNonce.
func (s *store) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	r, err := s.Storage.AuthRequestByCode(ctx, code)
	if err == nil && s.currentFault() == WrongNonce {
		if ar, ok := r.(*storage.AuthRequest); ok {
			ar.Nonce = "a-nonce-of-another-sign-in"
		}
	}
	return r, err
}

func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, token, scopes); err != nil {
		return err
	}
	s.addGroups(info, token.GetSubject())
	return nil
}

func (s *store) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	s.addGroups(info, info.Subject)
	return nil
}

func (s *store) addGroups(info *oidc.UserInfo, subject string) {
	if groups := s.users.groupsOf(subject); len(groups) > 0 {
		info.AppendClaims("groups", groups)
	}
}

// client is a registered client with the ID token settings the faults need.
type client struct {
	op.Client
	fault   Fault
	profile bool
}

func (c client) IDTokenLifetime() time.Duration {
	if c.fault == ExpiredIDToken {
		return -10 * time.Minute
	}
	return c.Client.IDTokenLifetime()
}

func (c client) IDTokenUserinfoClaimsAssertion() bool { return c.profile }

// RedirectURIGlobs and PostLogoutRedirectURIGlobs keep the example's dev-mode globs
// visible through the wrapper.
func (c client) RedirectURIGlobs() []string {
	if g, ok := c.Client.(op.HasRedirectGlobs); ok {
		return g.RedirectURIGlobs()
	}
	return nil
}

func (c client) PostLogoutRedirectURIGlobs() []string {
	if g, ok := c.Client.(op.HasRedirectGlobs); ok {
		return g.PostLogoutRedirectURIGlobs()
	}
	return nil
}

type forgedKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k forgedKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k forgedKey) Key() any                                    { return k.key }
func (k forgedKey) ID() string                                  { return k.id }

// userStore is the example's UserStore, safe to change while the provider runs.
type userStore struct {
	mu     sync.Mutex
	byID   map[string]*storage.User
	groups map[string][]string
}

func (u *userStore) put(user *storage.User, groups []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.byID[user.ID] = user
	u.groups[user.ID] = slices.Clone(groups)
}

func (u *userStore) groupsOf(id string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.groups[id])
}

func (u *userStore) GetUserByID(id string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	if user, ok := u.byID[id]; ok {
		c := *user
		return &c
	}
	return nil
}

func (u *userStore) GetUserByUsername(name string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, user := range u.byID {
		if user.Username == name {
			c := *user
			return &c
		}
	}
	return nil
}

func (u *userStore) ExampleClientID() string { return storage.ServiceUserID }
