package runnerclient

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// A runner's life cycle, as network/gitlab.go drives it: RegisterRunner (register with a
// registration token), UnregisterRunner and UnregisterRunnerManager (unregister),
// ResetToken and ResetTokenWithPAT (reset-token). Each call succeeds on exactly one status,
// as the runner's doJSON expects; anything else is a *StatusError. RegisterCommand,
// UnregisterCommand and NextTokenReset choose among them as gitlab-runner v17.9's commands
// do (commands/register.go, unregister.go, multi.go).

// createdRunnerTokenPrefix is network.createdRunnerTokenPrefix.
const createdRunnerTokenPrefix = "glrt-"

// TokenIsCreatedRunnerToken is network.TokenIsCreatedRunnerToken: only glrt- marks a token
// of a runner created in GitLab (by an operator here). Any other token, glrtr- included,
// belongs to a runner registered with a registration token.
func TokenIsCreatedRunnerToken(token string) bool {
	return strings.HasPrefix(token, createdRunnerTokenPrefix)
}

// TokenResetIntervalFactor is common.TokenResetIntervalFactor: gitlab-runner run resets a
// token when this share of its lifetime has passed.
const TokenResetIntervalFactor = 0.75

// RegisterCommand does what `gitlab-runner register --non-interactive` does with token
// (commands/register.go askRunner): a glrt- token is verified (POST /runners/verify, and
// an id of 0 would panic the runner), any other token is a registration token for POST
// /runners, whose answer gives the runner's own token. Either way the client then holds
// what config.toml would: ID, Token, TokenObtainedAt (whole seconds) and TokenExpiresAt.
func (c *Client) RegisterCommand(ctx context.Context, token string, p RegisterParameters) error {
	obtained := time.Now().UTC().Truncate(time.Second)
	if TokenIsCreatedRunnerToken(token) {
		c.Token = token
		res, err := c.Verify(ctx)
		if err != nil {
			return err
		}
		c.ID, c.TokenObtainedAt, c.TokenExpiresAt = res.ID, obtained, res.TokenExpiresAt
		return nil
	}
	res, err := c.Register(ctx, token, p)
	if err != nil {
		return err
	}
	c.ID, c.Token, c.TokenObtainedAt, c.TokenExpiresAt = res.ID, res.Token, obtained, res.TokenExpiresAt
	return nil
}

// UnregisterCommand does what `gitlab-runner unregister` does for a runner of its config
// (commands/unregister.go unregisterRunner): DELETE /runners/managers with its system_id
// for a glrt- token, DELETE /runners (the whole runner) for any other.
func (c *Client) UnregisterCommand(ctx context.Context) error {
	if TokenIsCreatedRunnerToken(c.Token) {
		return c.UnregisterManager(ctx)
	}
	return c.Unregister(ctx)
}

// NextTokenReset is when gitlab-runner run resets the client's token itself
// (commands/multi.go nextRunnerToReset): TokenResetIntervalFactor of the way from
// TokenObtainedAt to TokenExpiresAt. ok is false for a token that never expires. A time in
// the past (a runner started after it) means at once, and a token already expired then
// gets 403 and stays expired.
func (c *Client) NextTokenReset() (at time.Time, ok bool) {
	if c.TokenExpiresAt.IsZero() {
		return time.Time{}, false
	}
	lifetime := c.TokenExpiresAt.Sub(c.TokenObtainedAt)
	return c.TokenObtainedAt.Add(time.Duration(TokenResetIntervalFactor * float64(lifetime.Nanoseconds()))), true
}

// RegisterParameters mirrors common.RegisterRunnerParameters: Tags is the comma-separated
// tag_list the runner sends.
type RegisterParameters struct {
	Description     string `json:"description,omitempty"`
	MaintenanceNote string `json:"maintenance_note,omitempty"`
	Tags            string `json:"tag_list,omitempty"`
	RunUntagged     bool   `json:"run_untagged"`
	Locked          bool   `json:"locked"`
	AccessLevel     string `json:"access_level,omitempty"`
	MaximumTimeout  int    `json:"maximum_timeout,omitempty"`
	Paused          bool   `json:"paused"`
}

// registerRunnerRequest mirrors common.RegisterRunnerRequest.
type registerRunnerRequest struct {
	RegisterParameters
	Info  Info   `json:"info,omitempty"`
	Token string `json:"token,omitempty"`
}

// RegisterResult mirrors common.RegisterRunnerResponse.
type RegisterResult struct {
	ID             int64     `json:"id,omitempty"`
	Token          string    `json:"token,omitempty"`
	TokenExpiresAt time.Time `json:"token_expires_at,omitempty"` // zero for null
}

// Register calls POST /runners with a registration token, as `gitlab-runner register
// --registration-token` does: 201 gives the new runner's id and token (glrtr-, from jobapi
// as from GitLab; 403: "check registration token"). The client's own Token is not used nor
// changed (RegisterCommand does that).
func (c *Client) Register(ctx context.Context, registrationToken string, p RegisterParameters) (RegisterResult, error) {
	var res RegisterResult
	// The runner sends getRunnerInfo(RunnerConfig{}): its info without executor or shell.
	info := c.Info
	info.Executor, info.Shell = "", ""
	body := registerRunnerRequest{RegisterParameters: p, Info: info, Token: registrationToken}
	rep, err := c.doJSON(ctx, http.MethodPost, "runners", runnerToken(registrationToken), body, http.StatusCreated, &res)
	if err != nil {
		return res, err
	}
	if rep.code != http.StatusCreated {
		return res, rep.statusError()
	}
	return res, nil
}

// unregisterRunnerRequest mirrors common.UnregisterRunnerRequest and
// common.UnregisterRunnerManagerRequest.
type unregisterRunnerRequest struct {
	Token    string `json:"token,omitempty"`
	SystemID string `json:"system_id,omitempty"`
}

// Unregister calls DELETE /runners with the client's token (network UnregisterRunner), as
// `gitlab-runner unregister` does for a token that is not glrt-: 204 means it is gone.
func (c *Client) Unregister(ctx context.Context) error {
	return c.deleteNoContent(ctx, "runners", unregisterRunnerRequest{Token: c.Token})
}

// UnregisterManager calls DELETE /runners/managers with the client's token and system id
// (network UnregisterRunnerManager), as `gitlab-runner unregister` does for a glrt- token:
// 204 means this manager is gone.
func (c *Client) UnregisterManager(ctx context.Context) error {
	return c.deleteNoContent(ctx, "runners/managers", unregisterRunnerRequest{Token: c.Token, SystemID: c.SystemID})
}

func (c *Client) deleteNoContent(ctx context.Context, path string, body unregisterRunnerRequest) error {
	rep, err := c.doJSON(ctx, http.MethodDelete, path, runnerToken(c.Token), body, http.StatusNoContent, nil)
	if err != nil {
		return err
	}
	if rep.code != http.StatusNoContent {
		return rep.statusError()
	}
	return nil
}

// ResetTokenResult mirrors common.ResetTokenResponse.
type ResetTokenResult struct {
	Token           string    `json:"token,omitempty"`
	TokenObtainedAt time.Time `json:"-"` // set by the runner on success
	TokenExpiresAt  time.Time `json:"token_expires_at,omitempty"`
}

// ResetToken calls POST /runners/reset_authentication_token with the client's token, as
// `gitlab-runner reset-token` does: 201 gives a new token, which, like the runner writing
// its config, the client uses from then on (so no other call of the client may run meanwhile).
func (c *Client) ResetToken(ctx context.Context) (ResetTokenResult, error) {
	return c.resetToken(ctx, "runners/reset_authentication_token", http.Header{}, &unregisterRunnerRequest{Token: c.Token})
}

// ResetTokenWithPAT calls POST /runners/:id/reset_authentication_token with PRIVATE-TOKEN
// and no body, as `gitlab-runner reset-token --pat` does.
func (c *Client) ResetTokenWithPAT(ctx context.Context, runnerID int64, pat string) (ResetTokenResult, error) {
	return c.resetToken(ctx, fmt.Sprintf("runners/%d/reset_authentication_token", runnerID), http.Header{"Private-Token": {pat}}, nil)
}

func (c *Client) resetToken(ctx context.Context, path string, auth http.Header, body *unregisterRunnerRequest) (ResetTokenResult, error) {
	var res ResetTokenResult
	rep, err := c.doJSON(ctx, http.MethodPost, path, auth, body, http.StatusCreated, &res)
	if err != nil {
		return res, err
	}
	if rep.code != http.StatusCreated {
		return res, rep.statusError()
	}
	// common.ResetToken: the runner keeps the new token and its times in config.toml.
	res.TokenObtainedAt = time.Now().UTC()
	c.Token, c.TokenObtainedAt, c.TokenExpiresAt = res.Token, res.TokenObtainedAt, res.TokenExpiresAt
	return res, nil
}
