// Runner protocol, a runner's life cycle. POST /runners takes a registration token; POST
// /runners/verify, DELETE /runners, DELETE /runners/managers and POST
// /runners/reset_authentication_token take the runner's own token (in the body or
// RUNNER-TOKEN). The operator's calls on runners are in op_runners.go.
//
// A runner's life cycle as gitlab-runner drives it: register with a registration token,
// unregister, unregister one manager, reset its token. Bodies as common/network.go sends
// them; the token may also come in the RUNNER-TOKEN header.

package handlers

import (
	"crypto/subtle"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
)

// registerRequest is common.RegisterRunnerRequest: the registration token, the runner's
// settings (tag_list as a comma-separated string) and its info, which is not kept (the
// manager appears with its first job request).
type registerRequest struct {
	runnerFields
	Token           string         `json:"token"`
	MaintenanceNote string         `json:"maintenance_note"`
	Info            api.RunnerInfo `json:"info"`
}

// registerRunner answers POST /runners: gitlab-runner register with a registration token.
// 403 when the token is wrong or registration tokens are off, as GitLab: the runner prints
// "forbidden (check registration token)".
func (h *Handler) registerRunner(w http.ResponseWriter, r *http.Request) error {
	if err := h.limit(r, "runners_register", clientAddr(r), h.limits.RunnerVerify); err != nil {
		return err
	}
	var req registerRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	token := runnerToken(r, req.Token)
	if h.registrationHash == nil {
		return &httpError{code: http.StatusForbidden, msg: "403 Forbidden - registration tokens are disabled (JOBAPI_RUNNER_REGISTRATION_TOKEN is unset)"}
	}
	if subtle.ConstantTimeCompare(secrettoken.Hash(token), h.registrationHash) != 1 {
		return &httpError{code: http.StatusForbidden, msg: "403 Forbidden - invalid registration token"}
	}
	u, err := req.update()
	if err != nil {
		return err
	}
	// Registered with a registration token: its tokens are glrtr-, as GitLab's, so that
	// gitlab-runner unregister deletes it (DELETE /runners) rather than one manager.
	runner := newRunner(u)
	runner.RegistrationToken = true
	created, newToken, err := h.svc.RegisterRunner(builds.WithActor(r.Context(),
		builds.Actor{Kind: builds.ActorRunner, Username: "registration token", Via: "request " + RequestID(r.Context())}), runner)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.RunnerCreated{ID: created.ID, Token: newToken, TokenExpiresAt: expiryJSON(created.TokenExpiresAt)})
	return nil
}

// expiryJSON is a token's token_expires_at: RFC 3339 in UTC, as GitLab, or null for a
// token that never expires (gitlab-runner then never rotates it).
func expiryJSON(at *time.Time) *string {
	if at == nil {
		return nil
	}
	s := at.UTC().Format(time.RFC3339)
	return &s
}

// runnerTokenRequest is the body of DELETE /runners, DELETE /runners/managers and POST
// /runners/reset_authentication_token.
type runnerTokenRequest struct {
	Token    string `json:"token"`
	SystemID string `json:"system_id"`
}

// decodeRunnerToken reads a runner-token body and spends the token's budget for the
// life-cycle calls.
func (h *Handler) decodeRunnerToken(r *http.Request) (runnerTokenRequest, error) {
	var req runnerTokenRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return req, err
	}
	req.Token = runnerToken(r, req.Token)
	return req, h.limit(r, "runners_lifecycle", req.Token, h.limits.RunnerVerify)
}

// unregisterRunner answers DELETE /runners: 204, the runner and its managers are gone.
func (h *Handler) unregisterRunner(w http.ResponseWriter, r *http.Request) error {
	req, err := h.decodeRunnerToken(r)
	if err != nil {
		return err
	}
	if err := h.svc.UnregisterRunner(r.Context(), req.Token); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// unregisterManager answers DELETE /runners/managers: 204, one system_id of the runner is
// gone; 404 when the runner has no such manager (as GitLab).
func (h *Handler) unregisterManager(w http.ResponseWriter, r *http.Request) error {
	req, err := h.decodeRunnerToken(r)
	if err != nil {
		return err
	}
	if req.SystemID == "" || !validSystemID(req.SystemID) {
		return badRequest("system_id is required: at most 128 letters, digits or _-.:")
	}
	if err := h.svc.UnregisterManager(r.Context(), req.Token, req.SystemID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resetRunnerToken answers POST /runners/reset_authentication_token: 201 with the new
// token, shown once; the old one keeps working for JOBAPI_RUNNER_TOKEN_ROTATION_GRACE.
func (h *Handler) resetRunnerToken(w http.ResponseWriter, r *http.Request) error {
	req, err := h.decodeRunnerToken(r)
	if err != nil {
		return err
	}
	token, err := h.svc.ResetRunnerToken(r.Context(), req.Token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.TokenReset{Token: token.Token, TokenExpiresAt: expiryJSON(token.ExpiresAt)})
	return nil
}

func managerInfo(r *http.Request, in api.RunnerInfo) builds.ManagerInfo {
	features := in.Features
	return builds.ManagerInfo{Version: clip(in.Version), Revision: clip(in.Revision), Platform: clip(in.Platform),
		Architecture: clip(in.Architecture), Executor: clip(in.Executor), Shell: clip(in.Shell), Features: features,
		IPAddress: clientAddr(r)}
}

// maxReported bounds runner-reported strings before they reach the database.
const maxReported = 255

// clip cuts s to at most maxReported bytes on a character boundary: half a UTF-8 sequence
// is invalid text, which Postgres refuses.
func clip(s string) string {
	if len(s) <= maxReported {
		return s
	}
	i := maxReported
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

func runnerToken(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	return r.Header.Get("RUNNER-TOKEN")
}

// validSystemID: systemIDs are "s_" or "r_" plus hex in practice; anything printable and
// short is kept. A loop rather than a regexp: it runs on every job request.
func validSystemID(id string) bool {
	return len(id) <= 128 && onlyBytes(id, "_<>.:-")
}

func (h *Handler) verifyRunner(w http.ResponseWriter, r *http.Request) error {
	var req api.VerifyRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if !validSystemID(req.SystemID) {
		return badRequest("system_id must be at most 128 letters, digits or _-.:")
	}
	token := runnerToken(r, req.Token)
	if err := h.limit(r, "runners_verify", token, h.limits.RunnerVerify); err != nil {
		return err
	}
	runner, err := h.svc.VerifyRunner(r.Context(), token, req.SystemID, managerInfo(r, req.Info))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.VerifyResponse{ID: runner.ID, Token: token, TokenExpiresAt: expiryJSON(runner.TokenExpiresAt)})
	return nil
}
