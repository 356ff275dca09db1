package handlers

// Personal access tokens, GitLab's API: an administrator creates them for anyone
// (/users/:id/personal_access_tokens), a user for itself (/user/personal_access_tokens);
// both read, revoke and rotate through /personal_access_tokens, a user its own tokens only
// (another's is a 404, as if it did not exist). The secret is in the answer to the
// creation and the rotation, never again.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/users"
)

func tokenView(t users.Token, secret string, now time.Time) api.PersonalAccessToken {
	v := api.PersonalAccessToken{ID: t.ID, Name: t.Name, Revoked: t.Revoked, CreatedAt: t.CreatedAt, Scopes: t.Scopes,
		UserID: t.UserID, LastUsedAt: t.LastUsedAt, Active: t.Active(now), Token: secret}
	if v.Scopes == nil {
		v.Scopes = []string{}
	}
	if t.ExpiresAt != nil {
		d := t.ExpiresAt.UTC().Format(time.DateOnly)
		v.ExpiresAt = &d
	}
	return v
}

// scopeList is GitLab's scopes: a JSON array, or one string of comma-separated scopes.
type scopeList []string

func (s *scopeList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*s = list
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err != nil {
		return badRequest("scopes must be an array of strings")
	}
	*s = strings.Split(one, ",")
	return nil
}

// readNewToken reads name, scopes and expires_at from a JSON or form body (scopes[]=…).
func readNewToken(r *http.Request) (users.NewToken, error) {
	var body struct {
		Name      *string   `json:"name"`
		Scopes    scopeList `json:"scopes"`
		ExpiresAt *string   `json:"expires_at"`
		// GitLab's; jobapi has nothing to describe a token with beyond its name.
		Description *string `json:"description"`
	}
	if isForm(r) {
		if err := parseForm(r); err != nil {
			return users.NewToken{}, err
		}
		if v, ok := r.Form["name"]; ok {
			body.Name = &v[len(v)-1]
		}
		body.Scopes = append(r.Form["scopes[]"], r.Form["scopes"]...)
		if v, ok := r.Form["expires_at"]; ok {
			body.ExpiresAt = &v[len(v)-1]
		}
	} else if err := decodeJSON(r, &body, true); err != nil {
		return users.NewToken{}, err
	}
	if body.Name == nil {
		return users.NewToken{}, badRequest("name is missing")
	}
	nt := users.NewToken{Name: *body.Name}
	for _, s := range body.Scopes {
		if s = strings.TrimSpace(s); s != "" {
			nt.Scopes = append(nt.Scopes, s)
		}
	}
	if body.ExpiresAt != nil {
		e, err := expiresAtField(*body.ExpiresAt)
		if err != nil {
			return users.NewToken{}, err
		}
		nt.ExpiresAt = e
	}
	return nt, nil
}

func (h *Handler) writeCreatedToken(w http.ResponseWriter, c users.CreatedToken) {
	writeJSON(w, http.StatusCreated, tokenView(c.Token, c.Secret, h.users.Now()))
}

// createUserToken is POST /users/:id/personal_access_tokens (administrators).
func (h *Handler) createUserToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "user_id")
	if err != nil {
		return err
	}
	nt, err := readNewToken(r)
	if err != nil {
		return err
	}
	c, err := h.users.CreateToken(r.Context(), id, nt)
	if err != nil {
		return err
	}
	h.writeCreatedToken(w, c)
	return nil
}

// selfUser is the caller's user id; the admin token has none (a 400).
func selfUser(r *http.Request) (int64, error) {
	a, _ := builds.ActorFrom(r.Context())
	if a.Kind != builds.ActorUser {
		return 0, badRequest("%s", users.ErrSelfOnly.Error())
	}
	return a.UserID, nil
}

// createOwnToken is POST /user/personal_access_tokens: a user's token for itself.
func (h *Handler) createOwnToken(w http.ResponseWriter, r *http.Request) error {
	uid, err := selfUser(r)
	if err != nil {
		return err
	}
	nt, err := readNewToken(r)
	if err != nil {
		return err
	}
	c, err := h.users.CreateToken(r.Context(), uid, nt)
	if err != nil {
		return err
	}
	h.writeCreatedToken(w, c)
	return nil
}

// listTokens is GET /personal_access_tokens: every token for an administrator (user_id
// narrows it), a user's own otherwise (another user_id is GitLab's 401).
func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	a, _ := builds.ActorFrom(r.Context())
	var uid int64
	if v := r.URL.Query().Get("user_id"); v != "" {
		if uid, err = strconv.ParseInt(v, 10, 64); err != nil || uid <= 0 {
			return badRequest("user_id must be a positive integer")
		}
	}
	if !a.Admin {
		if a.Kind != builds.ActorUser || (uid != 0 && uid != a.UserID) {
			return &httpError{code: http.StatusUnauthorized, msg: "401 Unauthorized - only administrators list other users' tokens"}
		}
		uid = a.UserID
	}
	list, total, err := h.users.Tokens(r.Context(), uid, pg)
	if err != nil {
		return err
	}
	now := h.users.Now()
	out := make([]api.PersonalAccessToken, len(list))
	for i, t := range list {
		out[i] = tokenView(t, "", now)
	}
	writePage(w, pg, total, out)
	return nil
}

// tokenOf reads the token a /personal_access_tokens/:id route names: "self" is the
// request's own token; a user reaches its own tokens only (another's is a 404).
func (h *Handler) tokenOf(r *http.Request, self bool) (users.Token, error) {
	a, _ := builds.ActorFrom(r.Context())
	if self {
		if a.Kind != builds.ActorUser {
			return users.Token{}, &httpError{code: http.StatusNotFound, msg: "404 Not Found - the admin token is not a personal access token"}
		}
		return h.users.TokenBySecret(r.Context(), credential(r))
	}
	id, err := pathID(r, "token_id")
	if err != nil {
		return users.Token{}, err
	}
	t, err := h.users.Token(r.Context(), id)
	if err != nil {
		return users.Token{}, err
	}
	if !a.Admin && (a.Kind != builds.ActorUser || t.UserID != a.UserID) {
		return users.Token{}, &httpError{code: http.StatusNotFound, msg: "404 Not Found"}
	}
	return t, nil
}

func (h *Handler) getToken(self bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		t, err := h.tokenOf(r, self)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, tokenView(t, "", h.users.Now()))
		return nil
	}
}

// revokeToken is DELETE /personal_access_tokens/:id and /self: 204; a token revoked
// already is a 400, as GitLab's.
func (h *Handler) revokeToken(self bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		t, err := h.tokenOf(r, self)
		if err != nil {
			return err
		}
		if err := h.users.RevokeToken(r.Context(), t.ID); err != nil {
			if errors.Is(err, builds.ErrNotFound) {
				return badRequest("token %d is revoked already", t.ID)
			}
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// rotateToken is POST /personal_access_tokens/:id/rotate and /self/rotate: the token is
// revoked and its successor answered (201), expiring at expires_at (query or body; a week
// without).
func (h *Handler) rotateToken(self bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		t, err := h.tokenOf(r, self)
		if err != nil {
			return err
		}
		expires := r.URL.Query().Get("expires_at")
		if isForm(r) {
			if err := parseForm(r); err != nil {
				return err
			}
			expires = r.Form.Get("expires_at")
		} else {
			raw, err := io.ReadAll(r.Body)
			if err != nil {
				return bodyError(err)
			}
			if len(bytes.TrimSpace(raw)) > 0 { // the body is optional
				var body struct {
					ExpiresAt *string `json:"expires_at"`
				}
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&body); err != nil {
					return badRequest("malformed JSON: %s", err.Error())
				}
				if body.ExpiresAt != nil {
					expires = *body.ExpiresAt
				}
			}
		}
		e, err := expiresAtField(expires)
		if err != nil {
			return err
		}
		c, err := h.users.RotateToken(r.Context(), t.ID, e)
		if err != nil {
			if errors.Is(err, builds.ErrNotFound) {
				return badRequest("token %d was revoked meanwhile", t.ID)
			}
			return err
		}
		writeJSON(w, http.StatusOK, tokenView(c.Token, c.Secret, h.users.Now()))
		return nil
	}
}
