package projects

import (
	"context"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// ProjectEnvironment is an environment of a project as the environments API shows it.
type ProjectEnvironment struct {
	ID          int64
	ProjectID   int64
	Name        string
	Slug        string
	ExternalURL string
	State       string // available or stopped
	Tier        string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// LastDeployment: the latest successful deployment (GitLab's last_deployment); nil
	// when none succeeded or when not asked for.
	LastDeployment *Deployment
}

// Deployment is one job's deployment to an environment. Status and FinishedAt are the
// job's: created until it runs, then running, success, failed, canceled or skipped.
type Deployment struct {
	ID              int64
	ProjectID       int64
	EnvironmentID   int64
	EnvironmentName string
	Ref, SHA        string
	Status          string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      *time.Time
	// The job that deploys (GitLab's deployable).
	Build builds.Build
}

// EnvironmentStore reads environments and deployments (Postgres). The store records them
// itself when a pipeline is created, a deploy job retried, a deploy or stop job finished.
type EnvironmentStore interface {
	// Environments lists a project's environments by id, and how many it has.
	Environments(ctx context.Context, projectID int64, p builds.Page) ([]ProjectEnvironment, int, error)
	// Environment returns one environment with its last deployment; builds.ErrNotFound if
	// the project has no such environment.
	Environment(ctx context.Context, projectID, id int64) (ProjectEnvironment, error)
	// Deployments lists a project's deployments by id, and how many it has.
	Deployments(ctx context.Context, projectID int64, p builds.Page) ([]Deployment, int, error)
}

// Environments lists a project's environments.
func (s *Service) Environments(ctx context.Context, projectID int64, p builds.Page) ([]ProjectEnvironment, int, error) {
	return s.store.Environments(ctx, projectID, p)
}

// Environment returns one environment of a project with its last deployment.
func (s *Service) Environment(ctx context.Context, projectID, id int64) (ProjectEnvironment, error) {
	return s.store.Environment(ctx, projectID, id)
}

// Deployments lists a project's deployments.
func (s *Service) Deployments(ctx context.Context, projectID int64, p builds.Page) ([]Deployment, int, error) {
	return s.store.Deployments(ctx, projectID, p)
}
