// Package hooks tells the world what jobapi's pipelines do, the way GitLab does: project
// webhooks (GitLab's /projects/:id/hooks, its Pipeline, Job and Push Hook payloads and
// headers) and commit statuses posted to the project's forge (package builds/forgestatus).
//
// Both go through one outbox in Postgres: a delivery row is written once per hook and event
// (a unique key), then sent by a worker on every replica that claims each due row alone and
// retries it with backoff until it is delivered or given up; every attempt is logged for
// the operator. Events are found by a pass that reads the builds' event log (build_events),
// not by the runner's requests: see scan.go for why.
package hooks

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/forgestatus"
)

// Hook is a project webhook, GitLab's project hook. Token is write-only: it is sent in
// X-Gitlab-Token and never shown.
type Hook struct {
	ID          int64
	ProjectID   int64
	UUID        string // X-Gitlab-Webhook-UUID: the hook's own, the same on every delivery
	URL         string
	Name        string
	Description string
	Token       string
	// Events the hook receives.
	PushEvents     bool
	TagPushEvents  bool
	PipelineEvents bool
	JobEvents      bool
	// PushEventsBranchFilter limits push events to branches matching it, read the way
	// BranchFilterStrategy says: wildcard (a glob with *), regex, or all_branches.
	PushEventsBranchFilter string
	BranchFilterStrategy   string
	EnableSSLVerification  bool
	CreatedAt              time.Time
	UpdatedAt              time.Time
	// RecentFailures counts its failed deliveries in a row; DisabledUntil is set once they
	// reach DisableAfter (see disable.go). Both are the sender's; an edit clears them.
	RecentFailures int
	DisabledUntil  *time.Time
}

// TokenSet says whether the hook has a secret token (GitLab's token_present).
func (h Hook) TokenSet() bool { return h.Token != "" }

// Branch filter strategies (GitLab's branch_filter_strategy).
const (
	FilterWildcard    = "wildcard"
	FilterRegex       = "regex"
	FilterAllBranches = "all_branches"
)

// Change is a hook's fields as an operator sets them; nil fields keep their value (on
// create: GitLab's defaults).
type Change struct {
	URL                    *string
	Name                   *string
	Description            *string
	Token                  *string
	PushEvents             *bool
	TagPushEvents          *bool
	PipelineEvents         *bool
	JobEvents              *bool
	PushEventsBranchFilter *string
	BranchFilterStrategy   *string
	EnableSSLVerification  *bool
}

// Store keeps hooks. Every method that names a project returns builds.ErrNotFound when the
// project, or its hook, does not exist.
type Store interface {
	// CreateHook stores a new hook; it receives events from now on, none from before.
	CreateHook(ctx context.Context, h Hook) (Hook, error)
	// Hooks lists one page of a project's hooks, oldest first, and their total.
	Hooks(ctx context.Context, projectID int64, page builds.Page) ([]Hook, int, error)
	Hook(ctx context.Context, projectID, id int64) (Hook, error)
	UpdateHook(ctx context.Context, h Hook) (Hook, error)
	// DeleteHook removes a hook and its deliveries.
	DeleteHook(ctx context.Context, projectID, id int64) error
	// ForgeStatus reads a project's forge status settings (builds.ErrNotFound: none).
	ForgeStatus(ctx context.Context, projectID int64) (forgestatus.Settings, error)
	// PutForgeStatus writes them; from then on the project's statuses go there.
	PutForgeStatus(ctx context.Context, s forgestatus.Settings) (forgestatus.Settings, error)
	DeleteForgeStatus(ctx context.Context, projectID int64) error
}

// Limits of what an operator may set.
const (
	maxURL    = 2048
	maxText   = 255
	maxToken  = 1024
	maxFilter = 1024
)

func checkText(field, v string, max int) error {
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return &builds.ValidationError{Msg: field + " must be UTF-8 text without NUL"}
	}
	if utf8.RuneCountInString(v) > max {
		return &builds.ValidationError{Msg: fmt.Sprintf("%s is longer than %d characters", field, max)}
	}
	return nil
}

// checkURL refuses what cannot be a webhook URL: no http(s) scheme, no host, credentials in
// it (they would be shown in every answer), or a loopback or private address when the
// local network is not allowed (the sender checks every address it connects to again).
func checkURL(raw string, allowLocal bool) error {
	if raw == "" {
		return &builds.ValidationError{Msg: "url is missing"}
	}
	if err := checkText("url", raw, maxURL); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return &builds.ValidationError{Msg: "url is invalid: an http:// or https:// URL with a host"}
	}
	if u.User != nil {
		return &builds.ValidationError{Msg: "url must not hold credentials: set token instead"}
	}
	if !allowLocal && localHost(u.Hostname()) {
		return &builds.ValidationError{Msg: "url is blocked: requests to the local network are not allowed (JOBAPI_HOOKS_ALLOW_LOCAL_NETWORK)"}
	}
	return nil
}

func checkStrategy(s string) error {
	switch s {
	case FilterWildcard, FilterRegex, FilterAllBranches:
		return nil
	}
	return &builds.ValidationError{Msg: fmt.Sprintf("branch_filter_strategy does not have a valid value: %.40q is not one of wildcard, regex, all_branches", s)}
}

// apply sets c's fields on h and checks the result.
func (c Change) apply(h *Hook, allowLocal bool) error {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	setBool := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	set(&h.URL, c.URL)
	set(&h.Name, c.Name)
	set(&h.Description, c.Description)
	set(&h.Token, c.Token)
	set(&h.PushEventsBranchFilter, c.PushEventsBranchFilter)
	set(&h.BranchFilterStrategy, c.BranchFilterStrategy)
	setBool(&h.PushEvents, c.PushEvents)
	setBool(&h.TagPushEvents, c.TagPushEvents)
	setBool(&h.PipelineEvents, c.PipelineEvents)
	setBool(&h.JobEvents, c.JobEvents)
	setBool(&h.EnableSSLVerification, c.EnableSSLVerification)
	if err := checkURL(h.URL, allowLocal); err != nil {
		return err
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"name", h.Name, maxText}, {"description", h.Description, maxText}, {"token", h.Token, maxToken},
		{"push_events_branch_filter", h.PushEventsBranchFilter, maxFilter}} {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	if err := checkStrategy(h.BranchFilterStrategy); err != nil {
		return err
	}
	if h.BranchFilterStrategy == FilterRegex {
		if _, err := compileFilter(h.PushEventsBranchFilter); err != nil {
			return &builds.ValidationError{Msg: "push_events_branch_filter is not a valid regular expression: " + err.Error()}
		}
	}
	return nil
}

// Service manages a project's hooks, its forge status settings and the log of their
// deliveries, and sends test deliveries.
type Service struct {
	store      Store
	log        DeliveryLog
	sender     *Sender
	allowLocal bool
	now        func() time.Time
}

// Deps are what a Service needs.
type Deps struct {
	Store Store
	Log   DeliveryLog
	// Sender sends test deliveries (its Outbox writes them).
	Sender *Sender
	// AllowLocal lets hook and forge URLs name loopback and private addresses (GitLab's
	// "allow requests to the local network").
	AllowLocal bool
	Now        func() time.Time // nil: time.Now
}

// NewService returns a Service over d.
func NewService(d Deps) *Service {
	if d.Store == nil || d.Log == nil || d.Sender == nil {
		panic("hooks.NewService: store, log and sender are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{store: d.Store, log: d.Log, sender: d.Sender, allowLocal: d.AllowLocal, now: d.Now}
}

// Create adds a hook to a project with GitLab's defaults: push events on, SSL verified,
// the wildcard branch filter.
func (s *Service) Create(ctx context.Context, projectID int64, c Change) (Hook, error) {
	h := Hook{ProjectID: projectID, PushEvents: true, EnableSSLVerification: true, BranchFilterStrategy: FilterWildcard}
	if err := c.apply(&h, s.allowLocal); err != nil {
		return Hook{}, err
	}
	h.UUID = newUUID()
	h.CreatedAt = s.now()
	h.UpdatedAt = h.CreatedAt
	return s.store.CreateHook(ctx, h)
}

// List returns one page of a project's hooks, oldest first, and their total.
func (s *Service) List(ctx context.Context, projectID int64, page builds.Page) ([]Hook, int, error) {
	return s.store.Hooks(ctx, projectID, page)
}

// Get returns one hook of a project.
func (s *Service) Get(ctx context.Context, projectID, id int64) (Hook, error) {
	return s.store.Hook(ctx, projectID, id)
}

// Update changes a hook; the token stays unless c sets it ("" removes it). As in GitLab, an
// edit re-enables a disabled hook: its failures count from zero again.
func (s *Service) Update(ctx context.Context, projectID, id int64, c Change) (Hook, error) {
	h, err := s.store.Hook(ctx, projectID, id)
	if err != nil {
		return Hook{}, err
	}
	if err := c.apply(&h, s.allowLocal); err != nil {
		return Hook{}, err
	}
	h.UpdatedAt = s.now()
	return s.store.UpdateHook(ctx, h)
}

// Delete removes a hook; its pending deliveries go with it.
func (s *Service) Delete(ctx context.Context, projectID, id int64) error {
	return s.store.DeleteHook(ctx, projectID, id)
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
