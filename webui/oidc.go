package webui

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/oidclogin"
)

// Single sign-in with OpenID Connect: /oidc/start sends the browser to the provider with a
// fresh state, nonce and PKCE verifier, kept in a short-lived signed cookie of this
// browser; /oidc/callback checks the provider's answer against that cookie (oidclogin),
// finds or creates the user (users.SignInWithIdentity) and starts a session as the token
// sign-in does (a new session id, __Host- cookie behind TLS, CSRF).

const (
	pendingCookie       = "jobapi_oidc"
	securePendingCookie = "__Host-jobapi_oidc"
	// pendingTTL bounds how long a sign-in at the provider may take.
	pendingTTL = 10 * time.Minute
)

type pendingCookieValue struct {
	oidclogin.Pending
	Expires int64 `json:"exp"`
}

func (u *UI) oidcStart(w http.ResponseWriter, r *http.Request) {
	if u.oidc == nil {
		u.errorPage(w, r, http.StatusNotFound, "Single sign-in is not configured on this server.")
		return
	}
	authURL, pending, err := u.oidc.Begin(r.Context(), localPath(r.URL.Query().Get("next")))
	if err != nil {
		u.log.WarnContext(r.Context(), "single sign-in not begun", "error", err)
		u.signInRefused(w, r, http.StatusServiceUnavailable, "The sign-in provider cannot be reached right now. Try again in a moment, or sign in with a token.")
		return
	}
	raw, _ := json.Marshal(pendingCookieValue{Pending: pending, Expires: u.now().Add(pendingTTL).Unix()})
	value := base64.RawURLEncoding.EncodeToString(raw)
	secure := u.secure(r)
	// Lax, not Strict: the provider's redirect back is a cross-site navigation, and the
	// cookie must come with it. It only ever holds this sign-in's secrets.
	http.SetCookie(w, &http.Cookie{Name: pendingCookieName(secure), Value: value + "." + u.sessions.sign("oidc|"+value),
		Path: "/", MaxAge: int(pendingTTL.Seconds()), HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

func pendingCookieName(secure bool) string {
	if secure {
		return securePendingCookie
	}
	return pendingCookie
}

// readPending returns this browser's sign-in, if it has one that is signed and not expired.
func (u *UI) readPending(r *http.Request) (oidclogin.Pending, bool) {
	for _, name := range []string{securePendingCookie, pendingCookie} {
		c, err := r.Cookie(name)
		if err != nil {
			continue
		}
		value, sig, ok := strings.Cut(c.Value, ".")
		if !ok || !hmac.Equal([]byte(sig), []byte(u.sessions.sign("oidc|"+value))) {
			return oidclogin.Pending{}, false
		}
		raw, err := base64.RawURLEncoding.DecodeString(value)
		var p pendingCookieValue
		if err != nil || json.Unmarshal(raw, &p) != nil || u.now().Unix() >= p.Expires {
			return oidclogin.Pending{}, false
		}
		return p.Pending, true
	}
	return oidclogin.Pending{}, false
}

func (u *UI) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if u.oidc == nil {
		u.errorPage(w, r, http.StatusNotFound, "Single sign-in is not configured on this server.")
		return
	}
	pending, _ := u.readPending(r)
	// The pending sign-in is used once, whatever the outcome.
	secure := u.secure(r)
	http.SetCookie(w, &http.Cookie{Name: pendingCookieName(secure), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	id, err := u.oidc.Finish(r.Context(), pending, r.URL.Query())
	if err != nil {
		u.log.WarnContext(r.Context(), "single sign-in refused", "subject", id.Subject, "error", err)
		switch {
		case errors.Is(err, oidclogin.ErrNotInGroup):
			claim, group := u.oidc.RequiredGroup()
			u.signInRefused(w, r, http.StatusForbidden, "Your account at the sign-in provider is not in the group "+group+
				" ("+claim+" claim) that may use jobapi. Nothing was created. Ask an administrator to add you to it.")
		case errors.Is(err, oidclogin.ErrUnavailable):
			u.signInRefused(w, r, http.StatusBadGateway, "The sign-in provider could not be reached to finish the sign-in. Try again.")
		case errors.Is(err, oidclogin.ErrStateMismatch):
			u.signInRefused(w, r, http.StatusBadRequest, "This sign-in answer does not belong to a sign-in begun in this browser (or it took over 10 minutes). Start again.")
		default:
			u.signInRefused(w, r, http.StatusBadRequest, "The sign-in provider's answer was refused: "+err.Error()+". Start again.")
		}
		return
	}
	user, err := u.users.SignInWithIdentity(r.Context(), users.Identity{Issuer: id.Issuer, Subject: id.Subject,
		Username: id.Username, Name: id.Name, Email: id.Email})
	var refused *users.AuthError
	switch {
	case errors.As(err, &refused):
		u.signInRefused(w, r, http.StatusForbidden, "Your jobapi account is blocked. Ask an administrator.")
		return
	case errors.Is(err, users.ErrEmailTaken):
		u.signInRefused(w, r, http.StatusConflict, "Another jobapi user has your email ("+id.Email+"). Nothing was created: ask an administrator to change one of them.")
		return
	case err != nil:
		u.fail(w, r, err)
		return
	}
	u.log.InfoContext(r.Context(), "single sign-in", "user_id", user.ID, "username", user.Username)
	u.sessions.issue(w, r, secure, sessionUser{UserID: user.ID, AdminMode: user.IsAdmin})
	// The session cookie is SameSite=Strict, so a browser does not send it along the
	// provider's cross-site redirect chain: this page moves on from jobapi's own origin.
	u.render(w, r, http.StatusOK, "signed_in", view{Title: "Signed in", Data: signedInData{Username: user.Username, Next: localPath(pending.Next)}})
}

type signedInData struct {
	Username, Next string
}

func (u *UI) signInRefused(w http.ResponseWriter, r *http.Request, status int, msg string) {
	u.render(w, r, status, "sign_in", view{Title: "Sign in", Data: signInData{Next: "/pipelines", Error: msg, SSO: u.ssoName()}})
}

// ssoName is the provider's name for the "Sign in with …" button ("" without single sign-in).
func (u *UI) ssoName() string {
	if u.oidc == nil {
		return ""
	}
	return u.oidc.ProviderName()
}
