// Package runners is the operator's side of runners (GitLab's /runners/:id API and the web
// UI's runner pages): the list, one runner with a page of its managers, its settings, the
// reset of its token by id, and its deletion. What gitlab-runner itself calls (register,
// verify, unregister, reset with its own token) and the cache of runners those calls read
// stay in builds; this package asks builds to forget a changed runner there and wake its
// held requests (RunnerChanged), to issue tokens as runners' own resets do, to record the
// audit log, and to delete a runner (the builds it holds end with it, which is the core's).
// builds never imports it.
package runners

import (
	"context"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
)

// Store keeps runners' rows (Postgres).
type Store interface {
	// Runners lists runners, oldest first, and their total.
	Runners(ctx context.Context, p builds.Page) ([]builds.Runner, int, error)
	// Runner returns a runner with one page of its managers (oldest first) and their total.
	// builds.ErrNotFound when there is no such runner.
	Runner(ctx context.Context, id int64, managers builds.Page) (builds.Runner, int, error)
	// UpdateRunner changes a runner's settings; builds.ErrNotFound when there is none.
	UpdateRunner(ctx context.Context, id int64, u builds.RunnerUpdate) (builds.Runner, error)
	// SetRunnerToken replaces a runner's token (an operator's reset): every earlier token,
	// a previous one in its grace included, stops working. builds.ErrNotFound when there
	// is no such runner.
	SetRunnerToken(ctx context.Context, id int64, tokenHash []byte, expiresAt *time.Time) error
}

// Builds is what the package asks of the core (a *builds.Service).
type Builds interface {
	// RunnerChanged forgets what this replica cached of runner id and bumps the queue
	// version naming it, so that no poll is answered from an entry older than the change.
	RunnerChanged(ctx context.Context, id int64)
	// NewRunnerToken issues a token for r with the configured lifetime.
	NewRunnerToken(r builds.Runner) builds.RunnerToken
	// DeleteRunner removes a runner and ends the builds its machines hold.
	DeleteRunner(ctx context.Context, id int64) error
	RecordAudit(ctx context.Context, action, target string, detail map[string]any)
}

// Deps are what a Service is built from; both are required.
type Deps struct {
	Builds Builds
	Store  Store
}

// Service administers runners for operators.
type Service struct {
	builds Builds
	store  Store
}

// New returns the service over d; it panics when a dependency is missing.
func New(d Deps) *Service {
	if d.Builds == nil || d.Store == nil {
		panic("runners.New: Builds and Store are required")
	}
	return &Service{builds: d.Builds, store: d.Store}
}

// List lists runners, oldest first.
func (s *Service) List(ctx context.Context, p builds.Page) ([]builds.Runner, int, error) {
	return s.store.Runners(ctx, p)
}

// Get returns one runner with a page of its managers, and how many it has: a token used
// from many machines has many.
func (s *Service) Get(ctx context.Context, id int64, managers builds.Page) (builds.Runner, int, error) {
	return s.store.Runner(ctx, id, managers)
}

// Update changes a runner's settings for the context's actor and makes every runner poll
// Postgres again, so an unpaused or retagged runner sees its builds at its next request.
func (s *Service) Update(ctx context.Context, id int64, u builds.RunnerUpdate) (builds.Runner, error) {
	r, err := s.store.UpdateRunner(ctx, id, u)
	if err != nil {
		return builds.Runner{}, err
	}
	s.builds.RunnerChanged(ctx, id)
	s.builds.RecordAudit(ctx, "runner_updated", target(id), builds.RunnerAuditDetail(r))
	return r, nil
}

// ResetToken gives runner id a new token for the context's actor (an operator, or
// gitlab-runner reset-token --pat), shown once. It revokes: every earlier token stops
// working at once.
func (s *Service) ResetToken(ctx context.Context, id int64) (builds.RunnerToken, error) {
	r, _, err := s.store.Runner(ctx, id, builds.Page{Page: 1, PerPage: 1})
	if err != nil {
		return builds.RunnerToken{}, err
	}
	issued := s.builds.NewRunnerToken(r)
	if err := s.store.SetRunnerToken(ctx, id, secrettoken.Hash(issued.Token), issued.ExpiresAt); err != nil {
		return builds.RunnerToken{}, err
	}
	s.builds.RunnerChanged(ctx, id)
	detail := map[string]any{}
	if issued.ExpiresAt != nil {
		detail["token_expires_at"] = issued.ExpiresAt.Format(time.RFC3339)
	}
	s.builds.RecordAudit(ctx, "runner_token_reset", target(id), detail)
	return issued, nil
}

// Delete removes runner id and its managers for the context's actor; the builds its
// machines hold end with it (builds.Service.DeleteRunner).
func (s *Service) Delete(ctx context.Context, id int64) error {
	return s.builds.DeleteRunner(ctx, id)
}

func target(id int64) string { return "runner:" + strconv.FormatInt(id, 10) }
