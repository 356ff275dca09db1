package webui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/environment"
)

// pages are the parsed templates: each page file with the shared layout.
type pages struct {
	byName map[string]*template.Template
}

// assetVersion changes with the embedded script and stylesheet, so that their URLs do too.
var assetVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := staticFS.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

var funcs = template.FuncMap{
	"dur":          durationText,
	"since":        func(t time.Time, now time.Time) string { return durationText(now.Sub(t)) + " ago" },
	"short":        func(sha string) string { return sha[:min(8, len(sha))] },
	"rfc3339":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"clock":        func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"statusOf":     func(s builds.Status) string { return string(s) },
	"label":        statusLabel,
	"jobLook":      jobLook,
	"pipelineLook": pipelineLook,
	"coverage":     coverageText,
	// webURL is s when it is an http(s) URL to link to, else "".
	"webURL": func(s string) string {
		if environment.IsWebURL(s) {
			return s
		}
		return ""
	},
	"add":     func(a, b int) int { return a + b },
	"add64":   func(a, b int64) int64 { return a + b },
	"seconds": func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) },
	"ms": func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64)
	},
	"asset": func(name string) string { return "/assets/" + name + "?v=" + assetVersion },
	"owner": ownerText,
}

// ownerText names who made a trigger token or a schedule ("" for one made before owners
// were kept).
func ownerText(o *builds.PipelineUser) string {
	switch {
	case o == nil:
		return ""
	case o.Name != "" && o.Name != o.Username:
		return o.Username + " (" + o.Name + ")"
	}
	return o.Username
}

func mustParsePages() *pages {
	p := &pages{byName: map[string]*template.Template{}}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		base := path.Base(name)
		if base == "layout.html" {
			continue
		}
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials/*.html", name))
		p.byName[strings.TrimSuffix(base, ".html")] = t
	}
	return p
}

// view is what every page template gets.
type view struct {
	Title string
	// Nav names the section of the navigation that is current.
	Nav      string
	CSRF     string
	SignedIn bool
	// Who is the signed-in user's username ("admin" for the admin token).
	Who string
	// Admin: the signed-in user administers the instance (its pages are in the navigation).
	Admin bool
	Now   time.Time
	// Live is the event stream's query ("pipelines", "pipeline=12", "job=34"): the page
	// subscribes to it and reloads its live parts on each notification.
	Live string
	// Notice and Alert are one-off messages (an action's outcome).
	Notice, Alert string
	Data          any
}

// render writes a page; a template error is a bug, answered 500 and logged.
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t, ok := u.pages.byName[page]
	if !ok {
		u.log.ErrorContext(r.Context(), "web page missing", "page", page)
		http.Error(w, "page missing", http.StatusInternalServerError)
		return
	}
	sess := sessionOf(r)
	v.CSRF, v.SignedIn, v.Now = sess.CSRF, sess.ID != "", u.now()
	if a, ok := builds.ActorFrom(r.Context()); ok && v.SignedIn {
		v.Who = a.Username
	}
	v.Admin = v.SignedIn && actorOf(r).Admin
	if v.Notice == "" {
		v.Notice = noticeText(r.URL.Query().Get("notice"))
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		u.log.ErrorContext(r.Context(), "web page not rendered", "page", page, "error", err)
		http.Error(w, "page not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders one named template of a page alone: what the script fetches to
// replace a live part of the page.
func (u *UI) fragment(w http.ResponseWriter, r *http.Request, page, name string, v view) {
	t, ok := u.pages.byName[page]
	if !ok {
		http.Error(w, "page missing", http.StatusInternalServerError)
		return
	}
	sess := sessionOf(r)
	v.CSRF, v.SignedIn, v.Now = sess.CSRF, sess.ID != "", u.now()
	if a, ok := builds.ActorFrom(r.Context()); ok && v.SignedIn {
		v.Who = a.Username
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		u.log.ErrorContext(r.Context(), "web fragment not rendered", "page", page, "fragment", name, "error", err)
		http.Error(w, "fragment not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// wantsFragment: the script asks for the live part of a page with ?fragment=1.
func wantsFragment(r *http.Request) bool { return r.URL.Query().Get("fragment") == "1" }

func (u *UI) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	u.render(w, r, status, "error", view{Title: http.StatusText(status), Data: errorData{Status: status, Message: msg}})
}

type errorData struct {
	Status  int
	Message string
}

// fail answers a failed read or action: what the service's sentinel errors mean to an
// operator, and a 503 when a backend is down (logged, as the API does).
func (u *UI) fail(w http.ResponseWriter, r *http.Request, err error) {
	var inv *builds.ValidationError
	switch {
	case errors.Is(err, builds.ErrNotFound):
		u.errorPage(w, r, http.StatusNotFound, "Not found: it may have been deleted.")
	case errors.As(err, &inv):
		u.errorPage(w, r, http.StatusBadRequest, inv.Error())
	case errors.Is(err, artifacts.ErrNotAccessible):
		u.errorPage(w, r, http.StatusForbidden, "These artifacts cannot be downloaded: the job says artifacts:access: none.")
	case errors.Is(err, builds.ErrFinished), errors.Is(err, builds.ErrNotRetryable):
		u.errorPage(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, builds.ErrConflict):
		u.errorPage(w, r, http.StatusConflict, "It changed while you acted on it; reload and look again.")
	case errors.Is(err, r.Context().Err()):
		// The browser went away.
	default:
		u.log.ErrorContext(r.Context(), "web page failed", "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "5")
		u.errorPage(w, r, http.StatusServiceUnavailable, "jobapi cannot answer this right now (a backend is unavailable). Try again in a few seconds.")
	}
}

func pathInt(r *http.Request, name string) (int64, error) {
	v, err := strconv.ParseInt(chi.URLParam(r, name), 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%s must be a positive integer: %w", name, builds.ErrNotFound)
	}
	return v, nil
}

func queryInt(r *http.Request, name string, def int64) int64 {
	v, err := strconv.ParseInt(r.URL.Query().Get(name), 10, 64)
	if err != nil || v < 0 {
		return def
	}
	return v
}

// statusLabel is a state as operators read it.
func statusLabel(s string) string {
	switch s {
	case string(builds.StatusWaiting):
		return "waiting for ack"
	case string(builds.StatusWaitingForResource):
		return "waiting for resource" // GitLab's label (Gitlab::Ci::Status::WaitingForResource)
	case "":
		return "unknown"
	}
	return s
}

func (u *UI) signInPage(w http.ResponseWriter, r *http.Request) {
	if _, err := u.sessions.read(r); err == nil || errors.Is(err, errRevocationUnknown) {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	u.render(w, r, http.StatusOK, "sign_in", view{Title: "Sign in", Data: signInData{Next: localPath(r.URL.Query().Get("next")), SSO: u.ssoName()}})
}

type signInData struct {
	Next  string
	Error string
	// SSO names the single sign-in provider ("": none configured).
	SSO string
}

// signIn takes a personal access token (the user signs in as themselves: an administrator
// in admin mode when the token has admin_mode, read-only with a read_api token) or the
// admin token. Refused tokens spend the same budgets as on the API (users.Authenticator).
func (u *UI) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	next := localPath(r.PostFormValue("next"))
	refuse := func(status int, msg string) {
		u.render(w, r, status, "sign_in", view{Title: "Sign in", Data: signInData{Next: next, Error: msg}})
	}
	auth := users.Authenticator{Guard: u.admin, Users: u.users}
	a, err := auth.Resolve(r.Context(), clientAddr(r), r.PostFormValue("token"), "")
	var throttled *users.ThrottledError
	var refused *users.AuthError
	switch {
	case errors.As(err, &throttled):
		secs := max(int(throttled.RetryAfter.Seconds()+0.999), 1)
		u.log.WarnContext(r.Context(), "web sign-in throttled: too many refused tokens", "client", clientAddr(r), "per_user", throttled.PerUser)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		who := "your address"
		if throttled.PerUser {
			who = "this account"
		}
		refuse(http.StatusTooManyRequests, fmt.Sprintf("Too many wrong tokens from %s. Try again in %d seconds.", who, secs))
		return
	case errors.As(err, &refused) && refused.Refusal == users.Blocked:
		u.log.WarnContext(r.Context(), "web sign-in refused: user blocked", "user_id", refused.UserID)
		refuse(http.StatusForbidden, "This account is blocked.")
		return
	case errors.As(err, &refused):
		u.log.WarnContext(r.Context(), "web sign-in refused: wrong token", "refusal", refused.Error())
		refuse(http.StatusUnauthorized, "That is neither an active personal access token nor the admin token.")
		return
	case err != nil:
		u.log.WarnContext(r.Context(), "web sign-in: token not checked", "error", err)
		refuse(http.StatusServiceUnavailable, "The server cannot check tokens right now. Try again in a moment.")
		return
	}
	if a.Kind != builds.ActorUser {
		u.startSession(w, r, sessionUser{}, next)
		return
	}
	if !a.HasScope(users.ScopeAPI) && !a.HasScope(users.ScopeReadAPI) {
		refuse(http.StatusForbidden, "That token has neither the api nor the read_api scope: it cannot sign in.")
		return
	}
	u.startSession(w, r, sessionUser{UserID: a.UserID, AdminMode: a.Admin, ReadOnly: !a.HasScope(users.ScopeAPI)}, next)
}

func (u *UI) signOut(w http.ResponseWriter, r *http.Request) {
	sess := sessionOf(r)
	u.sessions.clear(w, u.secure(r))
	msg := "Signed out."
	if u.sessions.revocations != nil {
		if err := u.sessions.revocations.RevokeSession(r.Context(), sess.ID, sess.Expires); err != nil {
			u.log.WarnContext(r.Context(), "web sign-out not recorded server-side; the cookie was cleared", "error", err)
			msg = "Signed out in this browser. The server could not record it (Redis unavailable): a copy of the cookie works until it expires."
		}
	}
	r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, session{}))
	u.render(w, r, http.StatusOK, "sign_in", view{Title: "Sign in", Notice: msg,
		Data: signInData{Next: "/pipelines"}})
}

// clientAddr is the peer's IP address, the key of the sign-in's failure budget (behind a
// load balancer, the balancer's: everyone shares one budget there).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
