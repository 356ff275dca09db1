package oidclogin_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jobapi/jobapi/oidclogin"
	"github.com/jobapi/jobapi/testenv/oidcprovider"
)

// The relying party against a real OpenID Provider (zitadel's op, started per test): the
// browser's part is an HTTP client that follows the provider's redirects and posts its
// login form; the callback it ends at is handed to Finish as the web UI would.

const redirectURL = "http://jobapi.invalid/oidc/callback"

var alice = oidcprovider.User{Subject: "u-alice", Username: "alice", Password: "alice-pw",
	Name: "Alice Liddell", Email: "alice@example.com", Groups: []string{"ci", "dev"}}

func start(t *testing.T, required string) (*oidcprovider.Provider, *oidclogin.RP) {
	t.Helper()
	op := oidcprovider.Start(t)
	op.AddClient("jobapi", "client-secret", redirectURL)
	op.AddUser(alice)
	op.AddUser(oidcprovider.User{Subject: "u-bob", Username: "bob", Password: "bob-pw", Name: "Bob", Email: "bob@example.com"})
	rp := oidclogin.New(oidclogin.Config{IssuerURL: op.Issuer, ClientID: "jobapi", ClientSecret: "client-secret",
		RedirectURL: redirectURL, RequiredGroup: required})
	return op, rp
}

// signIn runs a sign-in up to the callback: what Finish gets.
func signIn(t *testing.T, op *oidcprovider.Provider, rp *oidclogin.RP, user, password string) (oidclogin.Pending, url.Values) {
	t.Helper()
	ctx := context.Background()
	authURL, pending, err := rp.Begin(ctx, "/pipelines")
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	cb, err := op.LogIn(ctx, oidcprovider.NewBrowser(), authURL, user, password)
	if err != nil {
		t.Fatalf("LogIn: %v", err)
	}
	if got := cb.Scheme + "://" + cb.Host + cb.Path; got != redirectURL {
		t.Fatalf("the provider called back %s, want %s", got, redirectURL)
	}
	return pending, cb.Query()
}

func TestSignInReadsTheAccount(t *testing.T) {
	t.Parallel()
	for _, inIDToken := range []bool{false, true} {
		op, rp := start(t, "")
		op.ProfileInIDToken(inIDToken)
		pending, cb := signIn(t, op, rp, "alice", "alice-pw")
		got, err := rp.Finish(context.Background(), pending, cb)
		if err != nil {
			t.Fatalf("profile in ID token %v: Finish: %v", inIDToken, err)
		}
		want := oidclogin.Identity{Issuer: op.Issuer, Subject: "u-alice", Username: "alice", Name: "Alice Liddell",
			Email: "alice@example.com", Groups: []string{"ci", "dev"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("profile in ID token %v: identity (-want +got):\n%s", inIDToken, diff)
		}
	}
}

func TestSignInRefusesWhatIsNotThisSignIn(t *testing.T) {
	t.Parallel()
	op, rp := start(t, "")
	ctx := context.Background()

	t.Run("wrong state", func(t *testing.T) {
		pending, cb := signIn(t, op, rp, "alice", "alice-pw")
		cb.Set("state", pending.State+"x")
		if _, err := rp.Finish(ctx, pending, cb); !errors.Is(err, oidclogin.ErrStateMismatch) {
			t.Fatalf("Finish with another state: %v, want ErrStateMismatch", err)
		}
	})
	t.Run("another browser's sign-in", func(t *testing.T) {
		_, other, _ := rp.Begin(ctx, "/")
		_, cb := signIn(t, op, rp, "alice", "alice-pw")
		if _, err := rp.Finish(ctx, other, cb); !errors.Is(err, oidclogin.ErrStateMismatch) {
			t.Fatalf("Finish with another sign-in's pending: %v, want ErrStateMismatch", err)
		}
	})
	t.Run("no state kept", func(t *testing.T) {
		_, cb := signIn(t, op, rp, "alice", "alice-pw")
		cb.Set("state", "")
		if _, err := rp.Finish(ctx, oidclogin.Pending{}, cb); !errors.Is(err, oidclogin.ErrStateMismatch) {
			t.Fatalf("Finish without a pending sign-in: %v, want ErrStateMismatch", err)
		}
	})
	t.Run("PKCE verifier of another sign-in", func(t *testing.T) {
		pending, cb := signIn(t, op, rp, "alice", "alice-pw")
		pending.Verifier = "0123456789012345678901234567890123456789012345"
		if _, err := rp.Finish(ctx, pending, cb); !errors.Is(err, oidclogin.ErrRefused) {
			t.Fatalf("Finish with another verifier: %v, want ErrRefused (the provider refuses the code)", err)
		}
	})
	t.Run("code used twice", func(t *testing.T) {
		pending, cb := signIn(t, op, rp, "alice", "alice-pw")
		if _, err := rp.Finish(ctx, pending, cb); err != nil {
			t.Fatalf("first Finish: %v", err)
		}
		if _, err := rp.Finish(ctx, pending, cb); !errors.Is(err, oidclogin.ErrRefused) {
			t.Fatalf("second Finish with the same code: %v, want ErrRefused", err)
		}
	})
	t.Run("provider error", func(t *testing.T) {
		pending, _ := signIn(t, op, rp, "alice", "alice-pw")
		cb := url.Values{"state": {pending.State}, "error": {"access_denied"}}
		if _, err := rp.Finish(ctx, pending, cb); !errors.Is(err, oidclogin.ErrRefused) {
			t.Fatalf("Finish with error=access_denied: %v, want ErrRefused", err)
		}
	})
}

func TestSignInRefusesBadIDTokens(t *testing.T) {
	t.Parallel()
	for name, fault := range map[string]oidcprovider.Fault{
		"expired": oidcprovider.ExpiredIDToken, "forged signature": oidcprovider.ForgedSignature,
		"wrong nonce": oidcprovider.WrongNonce,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			op, rp := start(t, "")
			op.SetFault(fault)
			pending, cb := signIn(t, op, rp, "alice", "alice-pw")
			_, err := rp.Finish(context.Background(), pending, cb)
			if !errors.Is(err, oidclogin.ErrInvalidToken) {
				t.Fatalf("Finish: %v, want ErrInvalidToken", err)
			}
			t.Logf("refused: %v", err)
			// The same provider without the fault signs in: the refusal was the token's.
			op.SetFault(oidcprovider.NoFault)
			pending, cb = signIn(t, op, rp, "alice", "alice-pw")
			if _, err := rp.Finish(context.Background(), pending, cb); err != nil {
				t.Fatalf("Finish without the fault: %v", err)
			}
		})
	}
}

func TestSignInRequiresTheGroup(t *testing.T) {
	t.Parallel()
	op, rp := start(t, "ci")
	ctx := context.Background()
	pending, cb := signIn(t, op, rp, "bob", "bob-pw")
	id, err := rp.Finish(ctx, pending, cb)
	if !errors.Is(err, oidclogin.ErrNotInGroup) {
		t.Fatalf("bob (no groups): %v, want ErrNotInGroup", err)
	}
	if id.Subject != "u-bob" {
		t.Errorf("the refused identity names subject %q, want u-bob (for the log)", id.Subject)
	}
	pending, cb = signIn(t, op, rp, "alice", "alice-pw")
	if _, err := rp.Finish(ctx, pending, cb); err != nil {
		t.Fatalf("alice (in ci): %v", err)
	}
}

func TestSignInWithTheProviderDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	_ = ln.Close()
	rp := oidclogin.New(oidclogin.Config{IssuerURL: issuer, ClientID: "jobapi", ClientSecret: "s", RedirectURL: redirectURL})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := rp.Begin(ctx, "/"); !errors.Is(err, oidclogin.ErrUnavailable) {
		t.Fatalf("Begin with the provider down: %v, want ErrUnavailable", err)
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	ok := oidclogin.Config{IssuerURL: "https://id.example", ClientID: "c", ClientSecret: "s", RedirectURL: "https://ci.example/oidc/callback"}
	if err := ok.Check(); err != nil {
		t.Errorf("complete config: %v", err)
	}
	if err := (oidclogin.Config{}).Check(); err != nil {
		t.Errorf("no sign-in configured: %v", err)
	}
	bad := ok
	bad.ClientSecret = ""
	if err := bad.Check(); err == nil {
		t.Error("a config without its client secret passed")
	}
	bad = ok
	bad.RedirectURL = "/oidc/callback"
	if err := bad.Check(); err == nil {
		t.Error("a relative redirect URL passed")
	}
}
