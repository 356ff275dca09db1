package webui

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cookieOf returns the session cookie a response set.
func cookieOf(t *testing.T, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range rec.Result().Cookies() {
		if c.Name == sessionCookie || c.Name == secureSessionCookie {
			return c
		}
	}
	t.Fatal("no session cookie set")
	return nil
}

func requestWith(c *http.Cookie) *http.Request {
	r := httptest.NewRequest("GET", "/pipelines", nil)
	r.AddCookie(c)
	return r
}

// A session carries who signed in: the user's id, admin mode and read-only flags come back
// as issued; flags or a user id changed in the cookie break its signature; the admin
// token's sessions of before (v1: id and expiry only) still read, as the admin token's.
func TestSessionCarriesTheUser(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := newSessions("a-long-enough-admin-token", nil, func() time.Time { return now })
	for _, who := range []sessionUser{{}, {UserID: 42, AdminMode: true}, {UserID: 7, ReadOnly: true}} {
		rec := httptest.NewRecorder()
		issued := s.issue(rec, httptest.NewRequest("POST", "/sign_in", nil), false, who)
		got, err := s.read(requestWith(cookieOf(t, rec)))
		if err != nil || got.sessionUser != who || got.ID != issued.ID || got.CSRF != issued.CSRF {
			t.Errorf("issued %+v, read back %+v (%v)", issued, got, err)
		}
	}

	rec := httptest.NewRecorder()
	s.issue(rec, httptest.NewRequest("POST", "/sign_in", nil), false, sessionUser{UserID: 7})
	c := cookieOf(t, rec)
	enc, sig, _ := strings.Cut(c.Value, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(enc)
	for _, forged := range []string{
		strings.Replace(string(raw), "|7|00", "|7|10", 1), // admin mode switched on
		strings.Replace(string(raw), "|7|00", "|1|00", 1), // another user
	} {
		if forged == string(raw) {
			t.Fatalf("the payload %q has no user part to forge", raw)
		}
		fc := *c
		fc.Value = base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + sig
		if _, err := s.read(requestWith(&fc)); err == nil {
			t.Errorf("forged payload %q read as a session", forged)
		}
	}

	legacy := "v1|0123456789abcdef0123456789abcdef|" + strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
	lc := &http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(legacy)) + "." + s.sign(legacy)}
	got, err := s.read(requestWith(lc))
	if err != nil || got.UserID != 0 || got.ID != "0123456789abcdef0123456789abcdef" {
		t.Errorf("a v1 cookie: %+v %v, want the admin token's session", got, err)
	}
	// A well-signed payload of an unknown shape is no session.
	for _, odd := range []string{"v2|id|" + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + "|x|00", "v3|id|1|2|00"} {
		oc := &http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(odd)) + "." + s.sign(odd)}
		if _, err := s.read(requestWith(oc)); err == nil {
			t.Errorf("payload %q read as a session", odd)
		}
	}
}
