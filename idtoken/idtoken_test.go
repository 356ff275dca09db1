package idtoken_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/jobapi/jobapi/idtoken"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	p, err := idtoken.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func parse(t *testing.T, text []byte) []*rsa.PrivateKey {
	t.Helper()
	keys, err := idtoken.ParsePEM(text)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestSignVerifiesAgainstJWKS: a token verifies with the key its kid names in the JWKS (as
// a relying party finds it), and with no other; the retired key is listed too.
func TestSignVerifiesAgainstJWKS(t *testing.T) {
	t.Parallel()
	current, retired := parse(t, newKey(t))[0], parse(t, newKey(t))[0]
	s, err := idtoken.New([]*rsa.PrivateKey{current, retired, current})
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(s.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("JWKS lists %d keys, want 2 (a repeated key once): %s", len(set.Keys), s.JWKS())
	}
	for _, k := range set.Keys {
		if k.Algorithm != "RS256" || k.Use != "sig" || !k.IsPublic() || k.KeyID == "" {
			t.Errorf("JWKS entry %+v: want a public RS256 signing key with a kid", k)
		}
	}
	if set.Keys[0].KeyID != s.KeyID() {
		t.Errorf("first JWKS key %s, signing key %s", set.Keys[0].KeyID, s.KeyID())
	}
	claims := map[string]any{"sub": "project_path:jobapi/p:ref_type:branch:ref:main", "aud": []string{"a", "b"}, "exp": 2000000000}
	raw, err := s.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	h := tok.Headers[0]
	if h.KeyID != s.KeyID() || h.ExtraHeaders["typ"] != "JWT" || h.Algorithm != "RS256" {
		t.Errorf("header %+v: want kid %s, typ JWT, alg RS256", h, s.KeyID())
	}
	found := set.Key(h.KeyID)
	if len(found) != 1 {
		t.Fatalf("kid %s is %d keys of the JWKS", h.KeyID, len(found))
	}
	var got map[string]any
	if err := tok.Claims(found[0].Key, &got); err != nil {
		t.Fatalf("verify with the JWKS key: %v", err)
	}
	want := map[string]any{"sub": claims["sub"], "aud": []any{"a", "b"}, "exp": float64(2000000000)}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("claims %v, want %v", got, want)
	}
	if err := tok.Claims(set.Keys[1].Key, &got); err == nil {
		t.Error("the token verifies with the retired key too")
	}
}

// TestKeyIDsAreStable: two signers of one key (two replicas) name it the same.
func TestKeyIDsAreStable(t *testing.T) {
	t.Parallel()
	text := newKey(t)
	a, err := idtoken.New(parse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	b, err := idtoken.New(parse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if a.KeyID() != b.KeyID() || string(a.JWKS()) != string(b.JWKS()) {
		t.Errorf("one key, two kids or JWKS: %s %s", a.JWKS(), b.JWKS())
	}
}

func TestParsePEM(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})
	pubDER, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})

	if keys := parse(t, append(append([]byte{}, pkcs1...), newKey(t)...)); len(keys) != 2 || !keys[0].Equal(rsaKey) {
		t.Errorf("PKCS #1 then PKCS #8: %d keys, want 2, the PKCS #1 one first", len(keys))
	}
	for name, tc := range map[string]struct {
		text []byte
		want string
	}{
		"empty":      {nil, "no PEM-encoded RSA private key"},
		"not PEM":    {[]byte("hello"), "no PEM-encoded RSA private key"},
		"EC key":     {ecPEM, "need an RSA key"},
		"public key": {pubPEM, `"PUBLIC KEY"; want an RSA private key`},
		"corrupt":    {pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte("x")}), "PEM block 1"},
	} {
		_, err := idtoken.ParsePEM(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

func TestNewRefusesWeakKeys(t *testing.T) {
	t.Parallel()
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idtoken.New([]*rsa.PrivateKey{weak}); err == nil || !strings.Contains(err.Error(), "1024 bits") {
		t.Errorf("a 1024-bit key: error %v, want one naming its size", err)
	}
	if _, err := idtoken.New(nil); err == nil {
		t.Error("no keys: no error")
	}
}

// TestKeyringLoadsOnceAndRetries: a failed load is tried again; once loaded, never again.
func TestKeyringLoadsOnceAndRetries(t *testing.T) {
	t.Parallel()
	key := parse(t, newKey(t))
	calls := 0
	k := idtoken.NewKeyring(func(context.Context) ([]*rsa.PrivateKey, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("postgres away")
		}
		return key, nil
	})
	if _, err := k.Signer(context.Background()); err == nil {
		t.Fatal("first load failed, Signer did not")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := k.Signer(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if calls != 2 {
		t.Errorf("%d loads, want 2 (a failed one, then one for all)", calls)
	}
}
