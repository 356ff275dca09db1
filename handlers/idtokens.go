package handlers

import (
	"context"
	"net/http"

	"github.com/jobapi/jobapi/idtoken"
)

// IDTokenSigner signs the id_tokens of a job and lists the keys that verify them (package
// idtoken's Signer).
type IDTokenSigner interface {
	Sign(claims map[string]any) (string, error)
	JWKS() []byte
}

// openIDConfiguration is GET /.well-known/openid-configuration: what relying parties (Vault,
// cloud IAM) read to find the JWKS of the issuer they trust. The issuer is the instance's
// external URL, the iss of every ID token.
func (h *Handler) openIDConfiguration(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, idtoken.DiscoveryFor(h.externalBase(r)))
	return nil
}

// discoveryKeys is GET /oauth/discovery/keys, GitLab's JWKS path: every key that signs or
// signed ID tokens still in use.
func (h *Handler) discoveryKeys(w http.ResponseWriter, r *http.Request) error {
	s, err := h.idTokenSigner(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.JWKS())
	return nil
}

// idTokenSigner is the replica's signer, its keys read (or generated) on first use.
func (h *Handler) idTokenSigner(ctx context.Context) (IDTokenSigner, error) {
	if h.idTokens == nil {
		return nil, &httpError{code: http.StatusNotImplemented, msg: "501 Not Implemented - this replica signs no ID tokens"}
	}
	return h.idTokens(ctx)
}
