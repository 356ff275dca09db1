// Package listings holds GitLab's filtered reads across a project's jobs, the commits it
// built and the instance's runners (GET /projects/:id/jobs, …/repository/commits/:sha/statuses,
// /runners/all), and the few rows a job's GitLab shape needs beside the build: its project's
// path, its pipeline, its runner. The reads are the store's; this package gives them the
// clock the runner statuses are computed at. builds never imports it.
package listings

import (
	"context"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Store makes GitLab's filtered reads across a project's jobs, the commits it built and the
// instance's runners: the lists team scripts page through (GET /projects/:id/jobs,
// …/repository/commits/:sha/statuses, /runners/all), and the few rows a job's GitLab shape
// needs beside the build (its pipeline, its runner). Each list is one page and its total.
type Store interface {
	// ProjectKnown reports whether a project exists: a row, or pipelines of an implicit one.
	ProjectKnown(ctx context.Context, projectID int64) (bool, error)
	// ProjectPaths returns the paths of the projects that have rows; implicit ones are absent.
	ProjectPaths(ctx context.Context, ids []int64) (map[int64]string, error)
	// ProjectJobs lists a project's builds (every attempt), newest first.
	ProjectJobs(ctx context.Context, f JobFilter, p builds.Page) ([]builds.Build, int, error)
	// CommitStatuses lists the builds of a project's pipelines at a commit, oldest first.
	CommitStatuses(ctx context.Context, f CommitStatusFilter, p builds.Page) ([]builds.Build, int, error)
	// LatestSuccessfulJob finds, in the newest successful pipeline of a project's ref and
	// its child pipelines, the newest latest attempt of the named job that has an archive.
	// ErrNotFound otherwise.
	LatestSuccessfulJob(ctx context.Context, projectID int64, ref, name string) (int64, error)
	// PipelinesByID returns pipelines by id, without their builds; unknown ids are absent.
	PipelinesByID(ctx context.Context, ids []int64) (map[int64]builds.Pipeline, error)
	// RunnerListing lists runners, oldest first, each with its GitLab status at f.Now.
	RunnerListing(ctx context.Context, f RunnerFilter, p builds.Page) ([]ListedRunner, int, error)
	// RunnerManagers returns the managers of runners by runner id, oldest first.
	RunnerManagers(ctx context.Context, ids []int64) (map[int64][]builds.Manager, error)
	// RunnersByID returns runners by id with their status at now; unknown ids are absent.
	RunnersByID(ctx context.Context, ids []int64, now time.Time) (map[int64]ListedRunner, error)
	// ProjectPipelines lists a project's pipelines by q (checked), a page of them without
	// builds, and how many match.
	ProjectPipelines(ctx context.Context, projectID int64, q PipelineQuery, pg builds.Page) ([]builds.Pipeline, int, error)
	// LatestPipeline returns the newest pipeline of the project on one of refs (and at sha,
	// unless ""), child pipelines left out, with its builds. ErrNotFound when there is none.
	LatestPipeline(ctx context.Context, projectID int64, refs []string, sha string) (builds.Pipeline, error)
	// Project reads a project's row; ErrNotFound for an implicit project.
	Project(ctx context.Context, id int64) (builds.Project, error)
}

// JobFilter selects a project's jobs.
type JobFilter struct {
	ProjectID int64
	// Statuses: any of them; empty matches every state (GitLab's scope[]).
	Statuses []builds.Status
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
func RunnerStatus(r builds.Runner, now time.Time) string {
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
	builds.Runner
	Status    string
	IPAddress string
}

// Deps are what a Service is built from; every field is required.
type Deps struct {
	// Builds is the core: its clock, which runner statuses are computed at.
	Builds *builds.Service
	Store  Store
}

// Service serves the listings.
type Service struct {
	builds *builds.Service
	store  Store
}

// New wires the service. It panics when a required dependency is missing: production
// always gives both, and a service without them could list nothing.
func New(d Deps) *Service {
	switch {
	case d.Builds == nil:
		panic("listings.New: Deps.Builds is required")
	case d.Store == nil:
		panic("listings.New: Deps.Store is required")
	}
	return &Service{builds: d.Builds, store: d.Store}
}

// ProjectKnown reports whether a project exists (a row, or an implicit project's pipelines).
func (s *Service) ProjectKnown(ctx context.Context, projectID int64) (bool, error) {
	return s.store.ProjectKnown(ctx, projectID)
}

// ProjectPaths returns the paths of projects by id; an implicit project is absent.
func (s *Service) ProjectPaths(ctx context.Context, ids []int64) (map[int64]string, error) {
	if len(ids) == 0 {
		return map[int64]string{}, nil
	}
	return s.store.ProjectPaths(ctx, ids)
}

// ProjectJobs lists a project's jobs, newest first (the caller checks the project: ProjectKnown).
func (s *Service) ProjectJobs(ctx context.Context, f JobFilter, p builds.Page) ([]builds.JobView, int, error) {
	list, total, err := s.store.ProjectJobs(ctx, f, p)
	if err != nil {
		return nil, 0, err
	}
	return jobViews(list), total, nil
}

// jobViews are list entries, as the other job lists give them: the stored log size, no
// Redis read per row.
func jobViews(list []builds.Build) []builds.JobView {
	out := make([]builds.JobView, len(list))
	for i, b := range list {
		out[i] = builds.JobView{Build: b}
	}
	return out
}

// CommitStatuses lists the builds of a project's pipelines at a commit.
func (s *Service) CommitStatuses(ctx context.Context, f CommitStatusFilter, p builds.Page) ([]builds.Build, int, error) {
	return s.store.CommitStatuses(ctx, f, p)
}

// LatestSuccessfulJob finds the job whose archive GitLab's artifacts-by-ref serve: the
// newest latest attempt of the name that has an archive, in the newest successful pipeline
// of a project's ref or its child pipelines. ErrNotFound when there is none.
func (s *Service) LatestSuccessfulJob(ctx context.Context, projectID int64, ref, job string) (int64, error) {
	return s.store.LatestSuccessfulJob(ctx, projectID, ref, job)
}

// PipelinesByID returns pipelines by id without their builds.
func (s *Service) PipelinesByID(ctx context.Context, ids []int64) (map[int64]builds.Pipeline, error) {
	if len(ids) == 0 {
		return map[int64]builds.Pipeline{}, nil
	}
	return s.store.PipelinesByID(ctx, ids)
}

// RunnerListing lists runners as GitLab's /runners/all does, with their status now.
func (s *Service) RunnerListing(ctx context.Context, f RunnerFilter, p builds.Page) ([]ListedRunner, int, error) {
	f.Now = s.builds.Now()
	return s.store.RunnerListing(ctx, f, p)
}

// RunnersByID returns runners by id with their status now.
func (s *Service) RunnersByID(ctx context.Context, ids []int64) (map[int64]ListedRunner, error) {
	if len(ids) == 0 {
		return map[int64]ListedRunner{}, nil
	}
	return s.store.RunnersByID(ctx, ids, s.builds.Now())
}

// RunnerManagers returns the managers of runners, oldest first, by runner id.
func (s *Service) RunnerManagers(ctx context.Context, ids []int64) (map[int64][]builds.Manager, error) {
	if len(ids) == 0 {
		return map[int64][]builds.Manager{}, nil
	}
	return s.store.RunnerManagers(ctx, ids)
}
