// Package idtoken signs the OpenID Connect ID tokens of .gitlab-ci.yml's id_tokens (RS256
// JWTs, as GitLab's Gitlab::Ci::JwtV2) and describes the keys relying parties verify them
// with: the JWKS of GET /oauth/discovery/keys and the document of
// GET /.well-known/openid-configuration.
//
// A Signer holds one or more RSA private keys. The first signs; all of them are listed in
// the JWKS, so that a key being retired still verifies the tokens it signed until they
// expire. Each key's kid is its RFC 7638 thumbprint (SHA-256, base64url), as GitLab's, so
// every replica holding the same keys names them the same.
package idtoken

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Algorithm is the one signing algorithm: RS256, GitLab's and the one every relying party
// (Vault, AWS, GCP, Azure, sigstore) accepts.
const Algorithm = "RS256"

// KeyBits is the size of a generated key: 2048, GitLab's ci_jwt_signing_key.
const KeyBits = 2048

// Signer signs ID tokens with the first of its keys and lists all of them.
type Signer struct {
	signer jose.Signer
	kid    string
	jwks   []byte
}

// New returns a Signer for keys, the signing key first. Each must be an RSA key of at least
// 2048 bits; two copies of one key are one entry of the JWKS.
func New(keys []*rsa.PrivateKey) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("no signing key")
	}
	var set jose.JSONWebKeySet
	seen := map[string]bool{}
	for i, k := range keys {
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("key %d: an RSA key of %d bits; want at least 2048", i+1, k.N.BitLen())
		}
		pub := jose.JSONWebKey{Key: &k.PublicKey, Algorithm: Algorithm, Use: "sig"}
		tp, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("key %d: thumbprint: %w", i+1, err)
		}
		pub.KeyID = base64.RawURLEncoding.EncodeToString(tp)
		if !seen[pub.KeyID] {
			seen[pub.KeyID] = true
			set.Keys = append(set.Keys, pub)
		}
	}
	jwks, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("encode JWKS: %w", err)
	}
	kid := set.Keys[0].KeyID
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: keys[0], KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	return &Signer{signer: sig, kid: kid, jwks: jwks}, nil
}

// KeyID is the kid of the signing key.
func (s *Signer) KeyID() string { return s.kid }

// Sign returns the compact JWS of claims (a JSON object), with the signing key's kid and
// typ JWT in its header.
func (s *Signer) Sign(claims map[string]any) (string, error) {
	tok, err := jwt.Signed(s.signer).Claims(claims).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign ID token: %w", err)
	}
	return tok, nil
}

// JWKS is the JSON Web Key Set of every key's public half (GET /oauth/discovery/keys).
func (s *Signer) JWKS() []byte { return s.jwks }

// GenerateKey returns a new RSA key of KeyBits bits as a PKCS #8 PEM block.
func GenerateKey() ([]byte, error) {
	k, err := rsa.GenerateKey(rand.Reader, KeyBits)
	if err != nil {
		return nil, fmt.Errorf("generate RSA key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode RSA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePEM reads every RSA private key of text, in order: PKCS #1 ("RSA PRIVATE KEY") or
// PKCS #8 ("PRIVATE KEY") blocks, what openssl genrsa and genpkey write. Any other block,
// or text that is not PEM, is an error: a file meant to hold keys but holding none must not
// pass silently.
func ParsePEM(text []byte) ([]*rsa.PrivateKey, error) {
	var keys []*rsa.PrivateKey
	for n := 1; ; n++ {
		var b *pem.Block
		b, text = pem.Decode(text)
		if b == nil {
			break
		}
		var k *rsa.PrivateKey
		switch b.Type {
		case "RSA PRIVATE KEY":
			var err error
			if k, err = x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
				return nil, fmt.Errorf("PEM block %d: %w", n, err)
			}
		case "PRIVATE KEY":
			parsed, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("PEM block %d: %w", n, err)
			}
			var ok bool
			if k, ok = parsed.(*rsa.PrivateKey); !ok {
				return nil, fmt.Errorf("PEM block %d: a %T; ID tokens are RS256 and need an RSA key", n, parsed)
			}
		default:
			return nil, fmt.Errorf("PEM block %d is %q; want an RSA private key (RSA PRIVATE KEY or PRIVATE KEY)", n, b.Type)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM-encoded RSA private key found")
	}
	return keys, nil
}

// Claims lists the claims jobapi's ID tokens carry, for claims_supported.
var Claims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti",
	"namespace_path", "project_id", "project_path", "pipeline_id", "pipeline_source", "job_id",
	"ref", "ref_type", "ref_path", "ref_protected",
	"environment", "environment_protected", "deployment_tier", "environment_action",
	"runner_id", "runner_environment", "sha", "project_visibility",
	"job_project_id", "job_project_path", "job_namespace_path"}

// Discovery is the OpenID Provider metadata relying parties read from
// /.well-known/openid-configuration (OpenID Connect Discovery 1.0). jobapi issues ID tokens
// to jobs only: it has no authorization or token endpoint, so those fields are absent.
type Discovery struct {
	Issuer                           string   `json:"issuer"`
	JWKSURI                          string   `json:"jwks_uri"`
	ResponseTypesSupported           []string `json:"response_types_supported"`
	SubjectTypesSupported            []string `json:"subject_types_supported"`
	IDTokenSigningAlgValuesSupported []string `json:"id_token_signing_alg_values_supported"`
	ScopesSupported                  []string `json:"scopes_supported"`
	ClaimTypesSupported              []string `json:"claim_types_supported"`
	ClaimsSupported                  []string `json:"claims_supported"`
}

// DiscoveryFor is the metadata of the issuer at base (the instance's external URL, no
// trailing slash).
func DiscoveryFor(base string) Discovery {
	return Discovery{Issuer: base, JWKSURI: base + "/oauth/discovery/keys",
		ResponseTypesSupported: []string{"id_token"}, SubjectTypesSupported: []string{"public"},
		IDTokenSigningAlgValuesSupported: []string{Algorithm}, ScopesSupported: []string{"openid"},
		ClaimTypesSupported: []string{"normal"}, ClaimsSupported: Claims}
}
