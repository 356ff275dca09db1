// Package handlers is jobapi's HTTP surface: the GitLab v4 runner API, the operator API and
// health endpoints. Handlers decode into api types, call builds.Service with plain values,
// and map its results and sentinel errors to statuses in one place (respond.go).
//
// A file's name says which token its handlers take: runner_*.go are the runner protocol
// (runner, registration and job tokens, as gitlab-runner sends them), op_*.go the operator
// API, one file per resource (the admin PRIVATE-TOKEN); the rest is shared by both.
package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/auditlog"
	"github.com/jobapi/jobapi/builds/hooks"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/builds/listings"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/builds/pushes"
	"github.com/jobapi/jobapi/builds/resourcegroups"
	"github.com/jobapi/jobapi/builds/runners"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/builds/tokenguard"
	"github.com/jobapi/jobapi/builds/triggers"
	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/cisource"
	"github.com/jobapi/jobapi/faultlog"
	"github.com/jobapi/jobapi/httppark"
	"github.com/jobapi/jobapi/secrettoken"
)

// Flags is the operator side of the feature-flag backend (the Features API).
type Flags interface {
	List(r *http.Request) (any, error)
	Get(r *http.Request, name string) (any, error)
	Set(r *http.Request, name string, req FeatureChange) (any, error)
	Delete(r *http.Request, name string) error
}

// Health is what readiness checks.
type Health interface {
	Ready(r *http.Request) error
}

// Deps are what the HTTP surface needs.
type Deps struct {
	Service *builds.Service
	// Artifacts serves the jobs' artifacts and the pipelines' test reports.
	Artifacts *artifacts.Service
	// Logs reads the jobs' logs, archived or live.
	Logs *joblogs.Service
	// Projects keeps projects, their variables, protected refs and environments.
	Projects *projects.Service
	// Runners administers runners for operators: list, settings, token reset, deletion.
	Runners *runners.Service
	// Audit reads the audit log and records feature flag changes.
	Audit *auditlog.Service
	// Listings serve GitLab's filtered job, commit status and runner lists.
	Listings *listings.Service
	// ResourceGroups serves the resource groups API.
	ResourceGroups *resourcegroups.Service
	AdminToken     string
	// AdminGuard checks AdminToken and throttles guessing (nil: checked without throttling).
	AdminGuard *tokenguard.AdminGuard
	// WebhookGuard throttles guessing of webhook secrets (nil: no throttling).
	WebhookGuard *tokenguard.WebhookGuard
	// RegistrationToken lets gitlab-runner register with POST /runners ("": off, 403).
	RegistrationToken string
	Logger            *slog.Logger
	Flags             Flags  // nil: Features API answers 501
	Health            Health // nil: readiness checks the service only
	Registry          *prometheus.Registry
	// TraceWatch paces runners: a short trace interval while someone reads the log.
	TraceWatch builds.TraceWatch
	// Limiter and Limits rate-limit the runner API (nil: no limits).
	Limiter RateLimiter
	Limits  RateLimits
	// ExternalURL is the base of CI_SERVER_URL and job URLs ("": the request's scheme and Host).
	ExternalURL string
	// ArtifactUploadTimeout is the time an artifact upload's body may take (0: an hour).
	ArtifactUploadTimeout time.Duration
	// UI serves every path the API does not (the web UI at /); nil: those are 404.
	UI http.Handler
	// Includes reads .gitlab-ci.yml's include: files (nil: include is a 400).
	Includes *cisource.Source
	// Pushes receives forges' webhooks and keeps push settings (nil: those routes answer 501).
	Pushes *pushes.Service
	// IDTokens returns the signer of id_tokens, its keys loaded on first use (nil: the
	// discovery endpoints answer 501 and a job with id_tokens is not handed out).
	IDTokens func(context.Context) (IDTokenSigner, error)
	// Triggers and Schedules start pipelines from the repository (trigger tokens, schedules).
	Triggers  *triggers.Service
	Schedules *schedules.Service
	// Hooks keeps project webhooks and reads their delivery log (nil: those routes answer 501).
	Hooks *hooks.Service
	// Users keeps users and their personal access tokens (nil: only the admin token
	// authenticates, and the users routes answer 501).
	Users *users.Service
	// Access keeps project members and decides what callers may do (nil: only admins act
	// on projects).
	Access *access.Service
	// Parking is the listener the server serves from, through which the long poll holds
	// job requests without their goroutines (nil: they are held on them).
	Parking *httppark.Listener
}

// Handler carries the dependencies of every route.
type Handler struct {
	svc    *builds.Service
	arts   *artifacts.Service
	logs   *joblogs.Service
	prj    *projects.Service
	groups *resourcegroups.Service
	lists  *listings.Service
	// runners administers runners for operators (builds/runners).
	runners *runners.Service
	// audit reads the audit log and records feature flag changes (builds/auditlog).
	audit *auditlog.Service
	admin *tokenguard.AdminGuard
	// webhooks throttles wrong webhook signatures; webhookRefusals logs the refusals once
	// per interval (a guesser past its budget sends many).
	webhooks        *tokenguard.WebhookGuard
	webhookRefusals *faultlog.Tally
	// registrationHash is the registration token's hash (nil: registration is off).
	registrationHash []byte
	log              *slog.Logger
	flags            Flags
	health           Health
	traceWatch       builds.TraceWatch
	metrics          *httpMetrics
	limiter          RateLimiter
	limits           RateLimits
	features         featureSets
	external         string
	uploadTimeout    time.Duration
	ui               http.Handler
	includes         *cisource.Source
	pushes           *pushes.Service
	idTokens         func(context.Context) (IDTokenSigner, error)
	triggers         *triggers.Service
	schedules        *schedules.Service
	hooks            *hooks.Service
	users            *users.Service

	// faults logs the faults that repeat per request (a backend or the rate limiter not
	// answering) once per interval.
	faults  *faultlog.Tally
	access  *access.Service
	parking *httppark.Listener
}

// Trace update intervals sent to runners (GitLab's UPDATE_FREQUENCY_DEFAULT and while watched).
const (
	traceIntervalIdle    = 30 * time.Second
	traceIntervalWatched = 3 * time.Second
)

// New returns the whole HTTP surface.
func New(d Deps) http.Handler {
	h := &Handler{
		svc:           d.Service,
		arts:          d.Artifacts,
		logs:          d.Logs,
		prj:           d.Projects,
		groups:        d.ResourceGroups,
		lists:         d.Listings,
		runners:       d.Runners,
		audit:         d.Audit,
		log:           d.Logger,
		faults:        faultlog.NewTally(d.Logger, "requests degraded: a backend did not answer in time", 0),
		flags:         d.Flags,
		health:        d.Health,
		traceWatch:    d.TraceWatch,
		metrics:       newHTTPMetrics(d.Registry),
		limiter:       d.Limiter,
		limits:        d.Limits,
		external:      d.ExternalURL,
		uploadTimeout: d.ArtifactUploadTimeout,
		ui:            d.UI,
		includes:      d.Includes,
		idTokens:      d.IDTokens,
		pushes:        d.Pushes,
		triggers:      d.Triggers,
		schedules:     d.Schedules,
		hooks:         d.Hooks,
		users:         d.Users,
		access:        d.Access,
		parking:       d.Parking,
	}
	if h.uploadTimeout <= 0 {
		h.uploadTimeout = time.Hour
	}
	h.admin = d.AdminGuard
	h.webhooks = d.WebhookGuard
	h.webhookRefusals = faultlog.NewTally(d.Logger, "inbound webhooks throttled: too many wrong signatures", 0)
	if h.admin == nil {
		h.admin = tokenguard.NewAdminGuard(d.AdminToken, nil)
	}
	if d.RegistrationToken != "" {
		h.registrationHash = secrettoken.Hash(d.RegistrationToken)
	}
	return h.routes(d.Registry)
}
