// Package resourcegroups is GitLab's resource groups API: the groups a project's pipelines
// name with `resource_group:`, their process mode and the jobs waiting for them. Which job
// holds a group is the core's business (legend ⁴ of the transition table): the store assigns
// groups in the transactions that release, end or cancel their jobs. This package only reads
// the groups and changes their mode; builds never imports it.
package resourcegroups

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// ResourceGroup is a project's `resource_group:` as GitLab's resource groups API shows it:
// at most one job of the group holds it at a time, across all the project's pipelines. A
// group is created when a pipeline first names it.
type ResourceGroup struct {
	ID          int64
	ProjectID   int64
	Key         string
	ProcessMode string // one of ProcessModes
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Process modes, GitLab's names: which job a free group is assigned to next.
const (
	// ProcessUnordered (GitLab's default): the job waiting longest.
	ProcessUnordered = "unordered"
	// ProcessOldestFirst: the first upcoming job (created, scheduled or waiting) in
	// ascending pipeline order; the group stays free while that job is not waiting yet.
	ProcessOldestFirst = "oldest_first"
	// ProcessNewestFirst: the same in descending pipeline order.
	ProcessNewestFirst = "newest_first"
	// ProcessNewestReadyFirst: the waiting job of the newest pipeline.
	ProcessNewestReadyFirst = "newest_ready_first"
)

// ProcessModes lists the process modes, GitLab's order.
var ProcessModes = []string{ProcessUnordered, ProcessOldestFirst, ProcessNewestFirst, ProcessNewestReadyFirst}

// Store keeps resource groups (Postgres).
type Store interface {
	// ResourceGroups lists a project's groups by id, and how many it has.
	ResourceGroups(ctx context.Context, projectID int64, p builds.Page) ([]ResourceGroup, int, error)
	// ResourceGroup returns one group by key; builds.ErrNotFound when the project has none.
	ResourceGroup(ctx context.Context, projectID int64, key string) (ResourceGroup, error)
	// SetProcessMode changes a group's process mode and assigns the group if the new mode
	// lets a waiting job have it; builds.ErrNotFound when the project has no such group. It
	// returns whether a job was queued.
	SetProcessMode(ctx context.Context, projectID int64, key, mode string, now time.Time) (ResourceGroup, bool, error)
	// UpcomingJobs lists the group's jobs waiting for it (and, in ordered modes, the
	// created and scheduled ones it will wait for), in the order the mode serves them.
	UpcomingJobs(ctx context.Context, projectID int64, key string, p builds.Page) ([]builds.Build, int, error)
}

// Deps are what a Service is built from; every field is required.
type Deps struct {
	// Builds is the core: its clock, the queue a newly assigned group's job joins, and the
	// audit log of operator actions.
	Builds *builds.Service
	Store  Store
}

// Service serves the resource groups API.
type Service struct {
	builds *builds.Service
	store  Store
}

// New wires the service. It panics when a required dependency is missing: production
// always gives both, and a service without them could answer nothing.
func New(d Deps) *Service {
	switch {
	case d.Builds == nil:
		panic("resourcegroups.New: Deps.Builds is required")
	case d.Store == nil:
		panic("resourcegroups.New: Deps.Store is required")
	}
	return &Service{builds: d.Builds, store: d.Store}
}

// ResourceGroups lists a project's resource groups.
func (s *Service) ResourceGroups(ctx context.Context, projectID int64, p builds.Page) ([]ResourceGroup, int, error) {
	return s.store.ResourceGroups(ctx, projectID, p)
}

// ResourceGroup returns one resource group of a project by key.
func (s *Service) ResourceGroup(ctx context.Context, projectID int64, key string) (ResourceGroup, error) {
	return s.store.ResourceGroup(ctx, projectID, key)
}

// SetProcessMode changes a group's process mode (PUT …/resource_groups/:key).
func (s *Service) SetProcessMode(ctx context.Context, projectID int64, key, mode string) (ResourceGroup, error) {
	if !slices.Contains(ProcessModes, mode) {
		return ResourceGroup{}, &builds.ValidationError{
			Msg: "process_mode does not have a valid value (one of " + strings.Join(ProcessModes, ", ") + ")"}
	}
	g, queued, err := s.store.SetProcessMode(ctx, projectID, key, mode, s.builds.Now())
	if err != nil {
		return ResourceGroup{}, err
	}
	if queued {
		s.builds.QueueChanged(ctx)
	}
	s.builds.RecordAudit(ctx, "resource_group_updated", "project:"+strconv.FormatInt(projectID, 10)+"/resource_group:"+key,
		map[string]any{"process_mode": mode})
	return g, nil
}

// UpcomingJobs lists the jobs that will hold a group next (GitLab's upcoming_jobs).
func (s *Service) UpcomingJobs(ctx context.Context, projectID int64, key string, p builds.Page) ([]builds.JobView, int, error) {
	bs, total, err := s.store.UpcomingJobs(ctx, projectID, key, p)
	if err != nil {
		return nil, 0, err
	}
	views := make([]builds.JobView, len(bs))
	for i, b := range bs {
		views[i] = builds.JobView{Build: b}
	}
	return views, total, nil
}
