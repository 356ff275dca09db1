package builds

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ResourceGroup is a project's `resource_group:` as GitLab's resource groups API shows it:
// at most one job of the group holds it at a time, across all the project's pipelines
// (legend ⁴ of the transition table). A group is created when a pipeline first names it.
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

// ResourceGroupKeyProblem says what is wrong with a group's key, "" when nothing: GitLab
// validates keys as it does environment names.
func ResourceGroupKeyProblem(key string) string {
	if strings.TrimSpace(key) == "" {
		return "is empty"
	}
	return EnvironmentNameProblem(key)
}

// ResourceGroupStore keeps resource groups (Postgres). The store assigns groups itself,
// in the transactions that release, end or cancel their jobs.
type ResourceGroupStore interface {
	// ResourceGroups lists a project's groups by id, and how many it has.
	ResourceGroups(ctx context.Context, projectID int64, p Page) ([]ResourceGroup, int, error)
	// ResourceGroup returns one group by key; ErrNotFound when the project has none.
	ResourceGroup(ctx context.Context, projectID int64, key string) (ResourceGroup, error)
	// SetProcessMode changes a group's process mode and assigns the group if the new mode
	// lets a waiting job have it; ErrNotFound when the project has no such group. It
	// returns whether a job was queued.
	SetProcessMode(ctx context.Context, projectID int64, key, mode string, now time.Time) (ResourceGroup, bool, error)
	// UpcomingJobs lists the group's jobs waiting for it (and, in ordered modes, the
	// created and scheduled ones it will wait for), in the order the mode serves them.
	UpcomingJobs(ctx context.Context, projectID int64, key string, p Page) ([]Build, int, error)
}

// ResourceGroups lists a project's resource groups.
func (s *Service) ResourceGroups(ctx context.Context, projectID int64, p Page) ([]ResourceGroup, int, error) {
	if s.resourceGroups == nil {
		return nil, 0, ErrUnavailable
	}
	return s.resourceGroups.ResourceGroups(ctx, projectID, p)
}

// ResourceGroup returns one resource group of a project by key.
func (s *Service) ResourceGroup(ctx context.Context, projectID int64, key string) (ResourceGroup, error) {
	if s.resourceGroups == nil {
		return ResourceGroup{}, ErrUnavailable
	}
	return s.resourceGroups.ResourceGroup(ctx, projectID, key)
}

// SetProcessMode changes a group's process mode for actor (PUT …/resource_groups/:key).
func (s *Service) SetProcessMode(ctx context.Context, projectID int64, key, mode, actor string) (ResourceGroup, error) {
	if s.resourceGroups == nil {
		return ResourceGroup{}, ErrUnavailable
	}
	if !slices.Contains(ProcessModes, mode) {
		return ResourceGroup{}, invalid("process_mode does not have a valid value (one of %s)", strings.Join(ProcessModes, ", "))
	}
	g, queued, err := s.resourceGroups.SetProcessMode(ctx, projectID, key, mode, s.now())
	if err != nil {
		return ResourceGroup{}, err
	}
	if queued {
		s.bumpQueue(ctx)
	}
	s.audit(ctx, actor, "resource_group_updated", "project:"+strconv.FormatInt(projectID, 10)+"/resource_group:"+key,
		map[string]any{"process_mode": mode})
	return g, nil
}

// UpcomingJobs lists the jobs that will hold a group next (GitLab's upcoming_jobs).
func (s *Service) UpcomingJobs(ctx context.Context, projectID int64, key string, p Page) ([]JobView, int, error) {
	if s.resourceGroups == nil {
		return nil, 0, ErrUnavailable
	}
	bs, total, err := s.resourceGroups.UpcomingJobs(ctx, projectID, key, p)
	if err != nil {
		return nil, 0, err
	}
	views := make([]JobView, len(bs))
	for i, b := range bs {
		views[i] = JobView{Build: b}
	}
	return views, total, nil
}
