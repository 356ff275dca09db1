// Package webui is the operator web UI that `jobapi serve` serves at /: server-rendered
// pages (html/template) with one small hand-written script, both embedded in the binary, so
// that the UI needs no build step, no CDN and no separate process, and works offline.
//
// Pages read through builds.Service like the operator API does; changes are made with its
// methods too (cancel, retry, play, runner pause/resume/delete/reset, the two-phase flag), so
// the UI and the API share every rule and every audit record. Live pages hold one
// Server-Sent Events stream each, fed by the replica's one subscription to the Redis change
// notifications (Hub); the script then reloads the part of the page that changed.
//
// Sign-in takes a personal access token (the user signs in as themselves) or the admin token
// (the bootstrap credential) and gives an HMAC-signed session cookie (session.go) that
// carries the user; every request resolves it into the builds.Actor the actions record;
// every POST passes Go's CrossOriginProtection and must carry the session's CSRF token.
package webui

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/auditlog"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/builds/runners"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/builds/tokenguard"
	"github.com/jobapi/jobapi/builds/triggers"
	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/cipipeline"
	"github.com/jobapi/jobapi/oidclogin"
)

//go:embed templates/*.html templates/partials/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Flags is the feature-flag backend the two-phase page shows and changes (the same store
// the Features API changes).
type Flags interface {
	Feature(ctx context.Context, name string) (Feature, error)
	SetBoolean(ctx context.Context, name string, on bool) error
	SetActor(ctx context.Context, name, actor string, on bool) error
	SetPercentage(ctx context.Context, name string, percent int) error
	Delete(ctx context.Context, name string) error
}

// Feature is a flag with its gates, as GitLab's Features API shows them.
type Feature struct {
	Name  string
	State string // on, off or conditional
	// On is the boolean gate; Actors are "project:<id>" and "runner:<id>" gates; Percentage
	// is percentage_of_actors (0: none).
	On         bool
	Actors     []string
	Percentage int
}

// ErrFlagInvalid wraps a change the flag backend refused; its message is shown.
var ErrFlagInvalid = errors.New("invalid flag change")

// Deps are what the UI is built from.
type Deps struct {
	Service *builds.Service
	// Artifacts serves the jobs' artifacts and test reports.
	Artifacts *artifacts.Service
	// Logs reads the jobs' logs, archived or live.
	Logs *joblogs.Service
	// Projects keeps projects and their environments.
	Projects *projects.Service
	// Views read the pipeline listing, recent events and ack latency across builds.
	Views *views.Service
	// Runners administers runners (pause, token reset, deletion) and lists them.
	Runners *runners.Service
	// Audit reads the audit log (history pages) and records the two-phase flag's changes.
	Audit      *auditlog.Service
	AdminToken string
	// AdminGuard checks the sign-in token and throttles guessing (nil: AdminToken checked
	// without throttling).
	AdminGuard *tokenguard.AdminGuard
	// Users signs people in with their personal access tokens and checks a session's user
	// on each request (nil: only the admin token signs in).
	Users *users.Service
	// Flags nil: the two-phase page says the flag provider is managed elsewhere.
	Flags Flags
	// Revocations nil: signing out only clears the browser's cookie. With Redis behind it,
	// a Redis outage keeps sessions working (signature and expiry still checked) and a
	// sign-out during it is not remembered server-side; both are logged.
	Revocations Revocations
	// Pipelines runs the "Run a pipeline" form (nil: the form says this server cannot).
	Pipelines *cipipeline.Creator
	// Hub delivers change notifications to live pages (nil: pages do not update live).
	Hub *Hub
	// TraceWatch makes runners send their log every few seconds while a page tails it.
	TraceWatch builds.TraceWatch
	// OIDC signs people in with an OpenID Provider (nil: token sign-in only); it needs
	// Users.
	OIDC *oidclogin.RP
	// ExternalURL, when it is https, makes the session cookie Secure behind a TLS proxy.
	ExternalURL string
	Log         *slog.Logger
	Now         func() time.Time
	// Access decides what the signed-in user may see and do (nil: only administrators
	// act on projects).
	Access Permissions
	// Triggers and Schedules are the services behind the API's trigger tokens and pipeline
	// schedules: the pages change them through the same methods (nil: their pages say this
	// server has none).
	Triggers  *triggers.Service
	Schedules *schedules.Service
}

// UI is the web UI's HTTP handler.
type UI struct {
	svc        *builds.Service
	pipelines  *cipipeline.Creator
	arts       *artifacts.Service
	logs       *joblogs.Service
	prj        *projects.Service
	views      *views.Service
	runners    *runners.Service
	audit      *auditlog.Service
	flags      Flags
	sessions   *sessions
	admin      *tokenguard.AdminGuard
	users      *users.Service
	oidc       *oidclogin.RP
	hub        *Hub
	traceWatch builds.TraceWatch
	pages      *pages
	log        *slog.Logger
	now        func() time.Time
	// secureByConfig: JOBAPI_EXTERNAL_URL is https, so cookies are Secure whatever the
	// request says.
	secureByConfig bool
	lines          *lineCounts
	handler        http.Handler
	perms          Permissions
	triggers       *triggers.Service
	schedules      *schedules.Service
}

// New returns the web UI. Mount it at / after the API routes.
func New(d Deps) *UI {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	u := &UI{svc: d.Service, pipelines: d.Pipelines, arts: d.Artifacts, logs: d.Logs, prj: d.Projects, views: d.Views, runners: d.Runners, audit: d.Audit, flags: d.Flags, hub: d.Hub, traceWatch: d.TraceWatch, log: d.Log, now: d.Now,
		sessions: newSessions(d.AdminToken, d.Revocations, d.Now), pages: mustParsePages(),
		lines: newLineCounts(256), admin: d.AdminGuard, users: d.Users, oidc: d.OIDC, perms: d.Access,
		triggers: d.Triggers, schedules: d.Schedules}
	if u.users == nil {
		u.oidc = nil // single sign-in makes users: without them it stays off
	}
	if u.admin == nil {
		u.admin = tokenguard.NewAdminGuard(d.AdminToken, nil)
	}
	cop := http.NewCrossOriginProtection()
	if ext, err := url.Parse(d.ExternalURL); err == nil && ext.Scheme != "" && ext.Host != "" {
		u.secureByConfig = ext.Scheme == "https"
		// A proxy that rewrites Host would otherwise make every form look cross-origin.
		_ = cop.AddTrustedOrigin(ext.Scheme + "://" + ext.Host)
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.errorPage(w, r, http.StatusForbidden, "Cross-origin request refused: forms can only be sent from jobapi's own pages.")
	}))
	u.handler = cop.Handler(u.routes())
	return u
}

func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.handler.ServeHTTP(w, r) }

func (u *UI) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(securityHeaders)
	static, _ := fs.Sub(staticFS, "static")
	r.Handle("/assets/*", http.StripPrefix("/assets/", cacheAssets(http.FileServerFS(static))))
	r.Get("/sign_in", u.signInPage)
	r.Post("/sign_in", u.signIn)
	r.Get("/oidc/start", u.oidcStart)
	r.Get("/oidc/callback", u.oidcCallback)
	r.Group(func(r chi.Router) {
		r.Use(u.requireSession)
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {
			// The instance's pipelines are administrators'; a member starts at its projects.
			to := "/projects"
			if actorOf(r).Admin {
				to = "/pipelines"
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
		})
		// Every page and form declares what it needs (builds/access, as the API's routes).
		admin := r.With(u.can(access.ReadInstance))
		admin.Get("/pipelines", u.pipelinesPage)
		r.With(u.can(access.ListProjects)).Get("/projects", u.projectsPage)
		r.With(u.can(access.ReadPipelines)).Get("/projects/{project_id}", u.projectPage)
		r.With(u.can(access.ReadEnvironments)).Get("/projects/{project_id}/environments", u.environmentsPage)
		r.With(u.can(access.RunPipeline)).Get("/projects/{project_id}/pipelines/new", u.newPipelinePage)
		r.With(u.can(access.ReadPipelines)).Get("/projects/{project_id}/pipelines/{pipeline_id}", u.pipelinePage)
		r.With(u.can(access.ReadPipelines)).Get("/projects/{project_id}/jobs/{job_id}", u.jobPage)
		r.With(u.can(access.ManageTriggers)).Get("/projects/{project_id}/triggers", u.triggersPage)
		r.With(u.can(access.ReadSchedules)).Get("/projects/{project_id}/pipeline_schedules", u.schedulesPage)
		r.With(u.can(access.ManageSchedules)).Get("/projects/{project_id}/pipeline_schedules/{schedule_id}/edit", u.scheduleEditPage)
		r.With(u.can(access.ReadVariables)).Get("/projects/{project_id}/variables", u.variablesPage)
		r.With(u.can(access.WriteVariables)).Get("/projects/{project_id}/variables/{key}/edit", u.variableEditPage)
		r.With(u.can(access.ReadJobLogs)).Get("/projects/{project_id}/jobs/{job_id}/log", u.jobLog)
		r.With(u.can(access.ReadJobLogs)).Get("/projects/{project_id}/jobs/{job_id}/log/raw", u.jobLogRaw)
		r.With(u.can(access.ReadArtifacts)).Get("/projects/{project_id}/jobs/{job_id}/artifacts/{artifact_id}", u.jobArtifactDownload)
		u.gitlabPaths(r)
		admin.Get("/runners", u.runnersPage)
		admin.Get("/two_phase", u.twoPhasePage)
		admin.Get("/audit", u.auditPage)
		// A change notification carries no data ("something changed, reload"), so the
		// stream is open to every signed-in user; what a reload shows is guarded above.
		r.Get("/events", u.events)

		r.Group(func(r chi.Router) {
			r.Use(u.requireCSRF)
			r.Post("/sign_out", u.signOut)
			r.With(u.can(access.RunPipeline)).Post("/projects/{project_id}/pipelines", u.createPipeline)
			r.With(u.can(access.CancelJob)).Post("/projects/{project_id}/pipelines/{pipeline_id}/cancel", u.cancelPipeline)
			r.With(u.can(access.CancelJob)).Post("/projects/{project_id}/jobs/{job_id}/cancel", u.jobAction)
			r.With(u.can(access.RetryJob)).Post("/projects/{project_id}/jobs/{job_id}/retry", u.jobAction)
			r.With(u.can(access.PlayJob)).Post("/projects/{project_id}/jobs/{job_id}/play", u.jobAction)
			r.With(u.can(access.ManageTriggers)).Post("/projects/{project_id}/triggers", u.createTrigger)
			r.With(u.can(access.ManageTriggers)).Post("/projects/{project_id}/triggers/{trigger_id}/delete", u.deleteTrigger)
			// A schedule's own ref is checked by can (pathRef); a new ref by the handler.
			r.With(u.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules", u.createSchedule)
			r.With(u.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules/{schedule_id}", u.updateSchedule)
			r.With(u.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules/{schedule_id}/play", u.playSchedule)
			r.With(u.can(access.ManageSchedules)).Post("/projects/{project_id}/pipeline_schedules/{schedule_id}/delete", u.deleteSchedule)
			// A protected variable needs the protected action too: the handlers check it.
			r.With(u.can(access.WriteVariables)).Post("/projects/{project_id}/variables", u.createVariable)
			r.With(u.can(access.WriteVariables)).Post("/projects/{project_id}/variables/{key}", u.updateVariable)
			r.With(u.can(access.WriteVariables)).Post("/projects/{project_id}/variables/{key}/delete", u.deleteVariable)
			admin := r.With(u.can(access.ManageInstance))
			admin.Post("/runners/{runner_id}/pause", u.runnerPause)
			admin.Post("/runners/{runner_id}/resume", u.runnerPause)
			admin.Post("/runners/{runner_id}/delete", u.runnerDelete)
			admin.Post("/runners/{runner_id}/reset_token", u.runnerResetToken)
			admin.Post("/two_phase/flag", u.twoPhaseFlag)
		})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		u.errorPage(w, r, http.StatusNotFound, "There is no page here.")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		u.errorPage(w, r, http.StatusMethodNotAllowed, "This page does not take that method.")
	})
	return r
}

// securityHeaders keep the pages to their own script and styles, out of frames, and out
// of caches (they show tokens and live state).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; style-src-attr 'unsafe-inline'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/assets/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// cacheAssets lets browsers keep the script and stylesheet for a while; their URLs carry
// the binary's asset version (assetVersion), so a new release is fetched at once.
func cacheAssets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		next.ServeHTTP(w, r)
	})
}

type sessionKey struct{}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(sessionKey{}).(session)
	return s
}

// requireSession sends a browser without a valid session to the sign-in page (and an
// event stream or a script's fetch gets 401, which the script turns into that page).
func (u *UI) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := u.sessions.read(r)
		if errors.Is(err, errRevocationUnknown) {
			u.log.WarnContext(r.Context(), "web session accepted without its revocation check (Redis unavailable)")
			err = nil
		}
		if err != nil {
			if r.Method != http.MethodGet || r.Header.Get("Accept") == "text/event-stream" || r.Header.Get("X-Requested-With") != "" {
				u.errorPage(w, r, http.StatusUnauthorized, "Your session has ended. Sign in again.")
				return
			}
			http.Redirect(w, r, "/sign_in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		a, err := u.sessionActor(r, sess)
		if errors.Is(err, errNoSession) {
			// The user was deleted or blocked since the sign-in: the session ends now.
			u.sessions.clear(w, u.secure(r))
			u.errorPage(w, r, http.StatusUnauthorized, "Your session has ended: your account is blocked or gone.")
			return
		}
		if err != nil {
			u.log.WarnContext(r.Context(), "web session's user not read", "error", err)
			u.errorPage(w, r, http.StatusServiceUnavailable, "The server cannot check your session right now. Try again in a moment.")
			return
		}
		ctx := builds.WithActor(context.WithValue(r.Context(), sessionKey{}, sess), a)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// sessionActor is who a session acts as: the admin token's holder, or its user as the
// store has them now (errNoSession for a user deleted or blocked since).
func (u *UI) sessionActor(r *http.Request, sess session) (builds.Actor, error) {
	via := "web session " + sess.ID[:min(len(sess.ID), 8)]
	if sess.UserID == 0 {
		return builds.Actor{Kind: builds.ActorAdminToken, Username: builds.AdminUsername, Admin: true, Via: via}, nil
	}
	if u.users == nil {
		return builds.Actor{}, errNoSession
	}
	a, err := u.users.SessionActor(r.Context(), sess.UserID, sess.AdminMode, via)
	var refused *users.AuthError
	if errors.Is(err, builds.ErrNotFound) || errors.As(err, &refused) {
		return builds.Actor{}, errNoSession
	}
	if err == nil && sess.ReadOnly {
		a.Scopes = []string{users.ScopeReadAPI}
	}
	return a, err
}

// startSession signs who in: a new session (its id never reused), then on to next. Every
// way of signing in ends here (the token form; single sign-on).
func (u *UI) startSession(w http.ResponseWriter, r *http.Request, who sessionUser, next string) {
	u.sessions.issue(w, r, u.secure(r), who)
	http.Redirect(w, r, localPath(next), http.StatusSeeOther)
}

// requireCSRF refuses a state-changing request without the session's token: in the form
// field csrf_token, or the X-CSRF-Token header of the script's requests.
func (u *UI) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		token := r.Header.Get("X-CSRF-Token")
		if token == "" {
			token = r.PostFormValue("csrf_token")
		}
		if !u.sessions.checkCSRF(sessionOf(r), token) {
			u.errorPage(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong. Reload the page and try again.")
			return
		}
		if a, _ := builds.ActorFrom(r.Context()); !a.HasScope(users.ScopeAPI) && r.URL.Path != "/sign_out" {
			u.errorPage(w, r, http.StatusForbidden, "You signed in with a read_api token: this session can only read. Sign in with an api token to act.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure reports whether cookies must be Secure: the request came over TLS, through a
// proxy that says it did, or the configured external URL is https.
func (u *UI) secure(r *http.Request) bool {
	return u.secureByConfig || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// localPath keeps a redirect target (sign-in's next) on this site; anything else is "/".
// A target is a path that starts with one "/" and then neither "/" nor "\" (which
// browsers read as "//", another host), with no control byte or whitespace anywhere:
// browsers drop tab, CR and LF from a URL, so "/\t/evil.example" arrives as
// "//evil.example". The path holds to the same once percent-decoded ("/%09/evil",
// "/%2F/evil": a proxy or server may decode it), and the parsed URL has no scheme, host
// or user.
func localPath(next string) string {
	const home = "/"
	if !localPathOK(next) {
		return home
	}
	path, _, _ := strings.Cut(next, "?")
	if dec, err := url.PathUnescape(path); err != nil || !localPathOK(dec) {
		return home
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return home
	}
	return next
}

func localPathOK(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[1] == '/' || p[1] == '\\' {
		return false
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || unicode.IsSpace(c) || (c >= 0x80 && c <= 0x9f) {
			return false
		}
	}
	return true
}
