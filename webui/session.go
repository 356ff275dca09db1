package webui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sessions are HMAC-signed cookies, not rows: the cookie carries a random session id, its
// expiry and who signed in (a user's id, or 0 for the admin token, with the user's admin
// mode and whether the sign-in token could only read), signed with a key derived from the
// admin token. A user's session is checked against the user on every request (deleted or
// blocked ends it at once). Every replica checks a
// cookie without asking Postgres or Redis, so the UI keeps working (and can show what is
// broken) while either is down, and changing the admin token ends every session at once.
// Signing out clears the cookie and records the session id as revoked in Redis until its
// expiry (Revocations); see Deps.Revocations for what a Redis outage does to that.

// sessionCookie is the cookie's name; the __Host- prefix is used behind TLS, where the
// browser then refuses the cookie unless it is Secure, host-only and for path /.
const (
	sessionCookie       = "jobapi_session"
	secureSessionCookie = "__Host-jobapi_session"
	// SessionTTL is how long a sign-in lasts.
	SessionTTL = 12 * time.Hour
)

// Revocations remember signed-out sessions until they would have expired.
type Revocations interface {
	// RevokeSession records that the session id may not be used before until passes.
	RevokeSession(ctx context.Context, id string, until time.Time) error
	// SessionRevoked reports whether the session id was revoked.
	SessionRevoked(ctx context.Context, id string) (bool, error)
}

type session struct {
	ID      string
	Expires time.Time
	// CSRF is the token every state-changing form of this session must carry.
	CSRF string
	sessionUser
}

// sessionUser is who a session acts as.
type sessionUser struct {
	// UserID is the signed-in user; 0 is the admin token's session.
	UserID int64
	// AdminMode: the user acts as an administrator (an admin whose sign-in token had
	// admin_mode, or who signed in through single sign-on as one).
	AdminMode bool
	// ReadOnly: signed in with a read_api token; the session cannot change anything.
	ReadOnly bool
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

type sessions struct {
	key         []byte
	revocations Revocations
	now         func() time.Time
}

func newSessions(adminToken string, rev Revocations, now func() time.Time) *sessions {
	mac := hmac.New(sha256.New, []byte(adminToken))
	mac.Write([]byte("jobapi web session key v1"))
	return &sessions{key: mac.Sum(nil), revocations: rev, now: now}
}

func (s *sessions) sign(payload string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (s *sessions) csrfFor(id string) string { return s.sign("csrf|" + id) }

// issue starts a session of who, a new session id each time (a sign-in never reuses a
// session), and sets its cookie.
func (s *sessions) issue(w http.ResponseWriter, r *http.Request, secure bool, who sessionUser) session {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	expires := s.now().Add(SessionTTL).Truncate(time.Second)
	payload := "v2|" + id + "|" + strconv.FormatInt(expires.Unix(), 10) + "|" + strconv.FormatInt(who.UserID, 10) +
		"|" + flag(who.AdminMode) + flag(who.ReadOnly)
	value := base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + s.sign(payload)
	http.SetCookie(w, &http.Cookie{Name: cookieName(secure), Value: value, Path: "/", Expires: expires,
		MaxAge: int(SessionTTL.Seconds()), HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
	return session{ID: id, Expires: expires, CSRF: s.csrfFor(id), sessionUser: who}
}

func cookieName(secure bool) string {
	if secure {
		return secureSessionCookie
	}
	return sessionCookie
}

// errNoSession: no cookie, or one that is forged, expired or revoked.
var errNoSession = errors.New("no valid session")

// read checks the request's session cookie: signature, expiry, then revocation.
func (s *sessions) read(r *http.Request) (session, error) {
	var c *http.Cookie
	for _, name := range []string{secureSessionCookie, sessionCookie} {
		if got, err := r.Cookie(name); err == nil {
			c = got
			break
		}
	}
	if c == nil {
		return session{}, errNoSession
	}
	enc, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return session{}, errNoSession
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return session{}, errNoSession
	}
	payload := string(raw)
	if !hmac.Equal([]byte(sig), []byte(s.sign(payload))) {
		return session{}, errNoSession
	}
	// v1: the admin token's sessions from before users (id and expiry only);
	// v2: id, expiry, user id, admin mode and read-only flags.
	parts := strings.Split(payload, "|")
	var who sessionUser
	switch {
	case len(parts) == 3 && parts[0] == "v1":
	case len(parts) == 5 && parts[0] == "v2" && len(parts[4]) == 2:
		uid, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil || uid < 0 {
			return session{}, errNoSession
		}
		who = sessionUser{UserID: uid, AdminMode: parts[4][0] == '1', ReadOnly: parts[4][1] == '1'}
	default:
		return session{}, errNoSession
	}
	unix, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !s.now().Before(time.Unix(unix, 0)) {
		return session{}, errNoSession
	}
	sess := session{ID: parts[1], Expires: time.Unix(unix, 0), CSRF: s.csrfFor(parts[1]), sessionUser: who}
	if s.revocations != nil {
		revoked, err := s.revocations.SessionRevoked(r.Context(), sess.ID)
		if err != nil {
			// Redis is down: the signature and expiry still hold, so the session is kept
			// (signing everyone out during an outage would hide the UI when it is needed).
			// A session revoked earlier works again until Redis answers or it expires.
			return sess, errRevocationUnknown
		}
		if revoked {
			return session{}, errNoSession
		}
	}
	return sess, nil
}

// errRevocationUnknown: the session is valid, but whether it was signed out could not be
// checked. Callers accept it and log it.
var errRevocationUnknown = errors.New("session revocation could not be checked")

// clear removes the cookie in the browser.
func (s *sessions) clear(w http.ResponseWriter, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: cookieName(secure), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
}

// checkCSRF compares a form's token with the session's in constant time.
func (s *sessions) checkCSRF(sess session, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(sess.CSRF))
}
