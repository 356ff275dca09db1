// Runner protocol: the id_tokens of the job payload answered to POST /jobs/request (runner's
// token). The OpenID discovery endpoints here take no token: relying parties read them to
// verify those id_tokens.

package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
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

// idTokenGrace is GitLab's NOT_BEFORE_TIME: nbf lies this far before iat, for clocks that
// lag the server's.
const idTokenGrace = 5

// idTokenDefaultTTL is GitLab's DEFAULT_EXPIRE_TIME, for a job without a timeout.
const idTokenDefaultTTL = 5 * 60

// idTokenVariables mints the job's id_tokens, each a masked, non-public variable, as
// GitLab's Ci::Build#id_tokens_variables: its claims are GitLab's JwtV2 claims mapped to
// what jobapi knows (docs/id-tokens.md), aud expanded with the job's variables. A fresh jti
// each time: a retry, or the same job handed out again, gets a new token. A name another
// variable of the job already has keeps that variable, as GitLab's later layers win.
func idTokenVariables(s IDTokenSigner, a builds.Assignment, vars *varList, iss string, project jobProjectInfo,
	refName, refType string, protected bool, now time.Time) ([]api.JobVariable, error) {
	b := a.Build
	if len(b.Payload.IDTokens) == 0 {
		return nil, nil
	}
	if s == nil {
		return nil, errors.New("this replica signs no ID tokens")
	}
	refPath := "refs/heads/" + refName
	if refType == "tag" {
		refPath = "refs/tags/" + refName
	}
	ttl := b.TimeoutSeconds
	if ttl <= 0 {
		ttl = idTokenDefaultTTL
	}
	iat := now.Unix()
	lookup := expandedLookup(vars)
	var out []api.JobVariable
	for _, t := range b.Payload.IDTokens {
		if _, taken := vars.get(t.Name); taken {
			continue
		}
		auds := make([]string, len(t.Aud))
		for i, x := range t.Aud {
			auds[i] = ciconfig.ExpandVariables(x, lookup)
		}
		var aud any = auds
		if !t.AudList {
			aud = auds[0]
		}
		jti, err := newJTI()
		if err != nil {
			return nil, err
		}
		c := map[string]any{
			"iss": iss, "sub": "project_path:" + project.fullPath + ":ref_type:" + refType + ":ref:" + refName,
			"aud": aud, "iat": iat, "nbf": iat - idTokenGrace, "exp": iat + int64(ttl), "jti": jti,
			"namespace_path": projectNamespace, "project_id": strconv.FormatInt(b.ProjectID, 10),
			"project_path": project.fullPath, "pipeline_id": strconv.FormatInt(b.PipelineID, 10),
			"pipeline_source": a.Pipeline.Source, "job_id": strconv.FormatInt(b.ID, 10),
			"ref": refName, "ref_type": refType, "ref_path": refPath, "ref_protected": strconv.FormatBool(protected),
			"runner_id": b.RunnerID, "runner_environment": "self-hosted", "sha": b.SHA,
			"project_visibility": "private",
			"job_project_id":     strconv.FormatInt(b.ProjectID, 10), "job_project_path": project.fullPath,
			"job_namespace_path": projectNamespace,
		}
		if env := b.Payload.Environment; env != nil {
			c["environment"], c["environment_protected"] = env.Name, "false"
			c["deployment_tier"], c["environment_action"] = env.Tier, env.Action
		}
		tok, err := s.Sign(c)
		if err != nil {
			return nil, err
		}
		out = append(out, api.JobVariable{Key: t.Name, Value: tok, Masked: true})
	}
	return out, nil
}

// expandedLookup reads the job's variables with their own references expanded (GitLab
// expands aud against sort_and_expand_all), a raw one as it is; a cycle ends in nothing.
func expandedLookup(vars *varList) func(string) (string, bool) {
	var lookup func(name string, seen map[string]bool) (string, bool)
	lookup = func(name string, seen map[string]bool) (string, bool) {
		i, ok := vars.at[name]
		if !ok || seen[name] {
			return "", ok
		}
		v := vars.list[i]
		if v.Raw {
			return v.Value, true
		}
		seen[name] = true
		defer delete(seen, name)
		return ciconfig.ExpandVariables(v.Value, func(n string) (string, bool) { return lookup(n, seen) }), true
	}
	return func(name string) (string, bool) { return lookup(name, map[string]bool{}) }
}

// newJTI is a random UUID (version 4), GitLab's jti.
func newJTI() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", fmt.Errorf("jti: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}
