package builds

import (
	"context"
	"errors"
	"time"
)

// Project is a project that owns a repository. A pipeline may name a project id that has no
// row: that implicit project has no repository, and its jobs run with GIT_STRATEGY=none.
type Project struct {
	ID   int64
	Name string
	Path string
	// RepoURL is the git remote as the operator gave it, credentials included: only the job
	// payload carries it so. Show gitremote.Redact(RepoURL) anywhere else.
	RepoURL       string
	DefaultBranch string
	// CIConfigPath is GitLab's ci_config_path: the file a pipeline from the repository
	// reads ("": .gitlab-ci.yml).
	CIConfigPath string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ProjectVariable is a project CI/CD variable (GitLab's shape).
type ProjectVariable struct {
	Key          string
	Value        string
	Masked       bool
	Protected    bool
	VariableType string // VariableEnv or VariableFile
}

// Variable types, GitLab's names.
const (
	VariableEnv  = "env_var"
	VariableFile = "file"
)

// ErrExists: a project path or a variable key is taken.
var ErrExists = errors.New("already exists")

// JobProject is what a job payload needs of its project: nil Project for an implicit one.
type JobProject struct {
	Project   *Project
	Variables []ProjectVariable
	// Protected are the project's protected refs, as a new pipeline's rules see them
	// (ProjectReader.JobProject reads them; the claim does not: its build carries the answer).
	Protected ProtectedRefNames
}

// RefProtected reports whether a pipeline on ref would be protected (see RefProtected).
func (p JobProject) RefProtected(ref string) bool {
	if p.Project == nil {
		return RefProtected(ref, nil)
	}
	return RefProtected(ref, &p.Protected)
}

// ProjectReader reads what a job and a new pipeline need of a project (Postgres; package
// builds/projects keeps the rest of it).
type ProjectReader interface {
	// Project reads a project's row (its default branch: a pipeline list's latest);
	// ErrNotFound for an implicit project.
	Project(ctx context.Context, id int64) (Project, error)
	// JobProject reads a project, its variables and its protected refs in one round trip;
	// a project id without a row gives a zero JobProject and no error.
	JobProject(ctx context.Context, projectID int64) (JobProject, error)
}

// ProjectForPipeline is a project with its variables, as a new pipeline's rules see them:
// an implicit project (no row) has neither.
func (s *Service) ProjectForPipeline(ctx context.Context, projectID int64) (JobProject, error) {
	return s.jobProject(ctx, projectID)
}

// jobProject reads a build's project for its payload and trace masking.
func (s *Service) jobProject(ctx context.Context, projectID int64) (JobProject, error) {
	return s.projects.JobProject(ctx, projectID)
}

// claimedProject is the project of a claimed build: the one the claim read with it, when
// the store reads it there (one statement fewer per job), else read now.
func (s *Service) claimedProject(ctx context.Context, c Claimed) (JobProject, error) {
	if c.Project != nil {
		return *c.Project, nil
	}
	return s.jobProject(ctx, c.ProjectID)
}

// maskedVariables are the project's masked values, as trace masking takes them.
func (p JobProject) maskedVariables() []Variable {
	var out []Variable
	for _, v := range p.Variables {
		if v.Masked {
			out = append(out, Variable{Key: v.Key, Value: v.Value, Masked: true})
		}
	}
	return out
}

// JobVariables are the project variables a build gets: protected ones only when its ref is
// protected (Build.Protected, decided when its pipeline was created), as GitLab.
func (p JobProject) JobVariables(protected bool) []ProjectVariable {
	if p.Project == nil {
		return nil
	}
	out := make([]ProjectVariable, 0, len(p.Variables))
	for _, v := range p.Variables {
		if v.Protected && !protected {
			continue
		}
		out = append(out, v)
	}
	return out
}
