package builds

import (
	"context"
	"time"
)

// Listings are GitLab's filtered reads across a project's jobs, the commits it built and the
// instance's runners: the lists team scripts page through (GET /projects/:id/jobs,
// …/repository/commits/:sha/statuses, /runners/all), and the few rows a job's GitLab shape
// needs beside the build (its pipeline, its runner). Each list is one page and its total.
type Listings interface {
	// ProjectKnown reports whether a project exists: a row, or pipelines of an implicit one.
	ProjectKnown(ctx context.Context, projectID int64) (bool, error)
	// ProjectPaths returns the paths of the projects that have rows; implicit ones are absent.
	ProjectPaths(ctx context.Context, ids []int64) (map[int64]string, error)
	// ProjectJobs lists a project's builds (every attempt), newest first.
	ProjectJobs(ctx context.Context, f JobFilter, p Page) ([]Build, int, error)
	// CommitStatuses lists the builds of a project's pipelines at a commit, oldest first.
	CommitStatuses(ctx context.Context, f CommitStatusFilter, p Page) ([]Build, int, error)
	// LatestSuccessfulJob finds, in the newest successful pipeline of a project's ref and
	// its child pipelines, the newest latest attempt of the named job that has an archive.
	// ErrNotFound otherwise.
	LatestSuccessfulJob(ctx context.Context, projectID int64, ref, name string) (int64, error)
	// PipelinesByID returns pipelines by id, without their builds; unknown ids are absent.
	PipelinesByID(ctx context.Context, ids []int64) (map[int64]Pipeline, error)
	// RunnerListing lists runners, oldest first, each with its GitLab status at f.Now.
	RunnerListing(ctx context.Context, f RunnerFilter, p Page) ([]ListedRunner, int, error)
	// RunnerManagers returns the managers of runners by runner id, oldest first.
	RunnerManagers(ctx context.Context, ids []int64) (map[int64][]Manager, error)
	// RunnersByID returns runners by id with their status at now; unknown ids are absent.
	RunnersByID(ctx context.Context, ids []int64, now time.Time) (map[int64]ListedRunner, error)
}

// JobFilter selects a project's jobs.
type JobFilter struct {
	ProjectID int64
	// Statuses: any of them; empty matches every state (GitLab's scope[]).
	Statuses []Status
}

// CommitStatusFilter selects the builds of a commit, as GitLab's commit statuses API does.
type CommitStatusFilter struct {
	ProjectID int64
	SHA       string
	// Ref, Stage and Name match exactly when set.
	Ref, Stage, Name string
	// All keeps retried attempts; without it only the latest attempt of each job is listed.
	All bool
}

// Runner statuses as GitLab computes them from the last contact.
const (
	RunnerOnline         = "online"
	RunnerOffline        = "offline"
	RunnerStale          = "stale"
	RunnerNeverContacted = "never_contacted"
)

// RunnerStatuses lists GitLab's runner statuses.
var RunnerStatuses = []string{RunnerOnline, RunnerOffline, RunnerStale, RunnerNeverContacted}

// GitLab's thresholds (Ci::Runner ONLINE_CONTACT_TIMEOUT and STALE_TIMEOUT): a runner is
// online when it asked for a job in the last two hours, stale when it has not been seen for a
// week (or was registered over a week ago and never seen).
const (
	RunnerOnlineWithin = 2 * time.Hour
	RunnerStaleAfter   = 7 * 24 * time.Hour
)

// RunnerStatus is GitLab's status of r at now; the store's filter computes the same rule.
func RunnerStatus(r Runner, now time.Time) string {
	switch {
	case r.ContactedAt == nil && r.CreatedAt.After(now.Add(-RunnerStaleAfter)):
		return RunnerNeverContacted
	case r.ContactedAt == nil || !r.ContactedAt.After(now.Add(-RunnerStaleAfter)):
		return RunnerStale
	case r.ContactedAt.After(now.Add(-RunnerOnlineWithin)):
		return RunnerOnline
	}
	return RunnerOffline
}

// RunnerFilter selects runners as GitLab's runner lists do; zero fields match everything.
type RunnerFilter struct {
	Paused *bool
	// Status is one of RunnerStatuses ("": any).
	Status string
	// Tags: runners that have every one of them.
	Tags []string
	Now  time.Time
}

// ListedRunner is a runner in a list: its status at the time of the read and the address
// its most recently seen manager came from.
type ListedRunner struct {
	Runner
	Status    string
	IPAddress string
}

func (s *Service) listings() (Listings, error) {
	if s.lists == nil {
		return nil, ErrUnavailable
	}
	return s.lists, nil
}

// ProjectKnown reports whether a project exists (a row, or an implicit project's pipelines).
func (s *Service) ProjectKnown(ctx context.Context, projectID int64) (bool, error) {
	l, err := s.listings()
	if err != nil {
		return false, err
	}
	return l.ProjectKnown(ctx, projectID)
}

// ProjectPaths returns the paths of projects by id; an implicit project is absent.
func (s *Service) ProjectPaths(ctx context.Context, ids []int64) (map[int64]string, error) {
	l, err := s.listings()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return map[int64]string{}, nil
	}
	return l.ProjectPaths(ctx, ids)
}

// ProjectJobs lists a project's jobs, newest first (the caller checks the project: ProjectKnown).
func (s *Service) ProjectJobs(ctx context.Context, f JobFilter, p Page) ([]JobView, int, error) {
	l, err := s.listings()
	if err != nil {
		return nil, 0, err
	}
	list, total, err := l.ProjectJobs(ctx, f, p)
	if err != nil {
		return nil, 0, err
	}
	return jobViews(list), total, nil
}

// jobViews are list entries, as the other job lists give them: the stored log size, no
// Redis read per row.
func jobViews(list []Build) []JobView {
	out := make([]JobView, len(list))
	for i, b := range list {
		out[i] = JobView{Build: b}
	}
	return out
}

// CommitStatuses lists the builds of a project's pipelines at a commit.
func (s *Service) CommitStatuses(ctx context.Context, f CommitStatusFilter, p Page) ([]Build, int, error) {
	l, err := s.listings()
	if err != nil {
		return nil, 0, err
	}
	return l.CommitStatuses(ctx, f, p)
}

// LatestSuccessfulJob finds the job whose archive GitLab's artifacts-by-ref serve: the
// newest latest attempt of the name that has an archive, in the newest successful pipeline
// of a project's ref or its child pipelines. ErrNotFound when there is none.
func (s *Service) LatestSuccessfulJob(ctx context.Context, projectID int64, ref, job string) (int64, error) {
	l, err := s.listings()
	if err != nil {
		return 0, err
	}
	return l.LatestSuccessfulJob(ctx, projectID, ref, job)
}

// PipelinesByID returns pipelines by id without their builds.
func (s *Service) PipelinesByID(ctx context.Context, ids []int64) (map[int64]Pipeline, error) {
	l, err := s.listings()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return map[int64]Pipeline{}, nil
	}
	return l.PipelinesByID(ctx, ids)
}

// RunnerListing lists runners as GitLab's /runners/all does, with their status now.
func (s *Service) RunnerListing(ctx context.Context, f RunnerFilter, p Page) ([]ListedRunner, int, error) {
	l, err := s.listings()
	if err != nil {
		return nil, 0, err
	}
	f.Now = s.now()
	return l.RunnerListing(ctx, f, p)
}

// RunnersByID returns runners by id with their status now.
func (s *Service) RunnersByID(ctx context.Context, ids []int64) (map[int64]ListedRunner, error) {
	l, err := s.listings()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return map[int64]ListedRunner{}, nil
	}
	return l.RunnersByID(ctx, ids, s.now())
}

// RunnerManagers returns the managers of runners, oldest first, by runner id.
func (s *Service) RunnerManagers(ctx context.Context, ids []int64) (map[int64][]Manager, error) {
	l, err := s.listings()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return map[int64][]Manager{}, nil
	}
	return l.RunnerManagers(ctx, ids)
}
