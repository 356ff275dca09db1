// Package projects keeps projects and what an operator sets on them: their variables,
// their protected branches and tags, and the environments and deployments their pipelines
// recorded (GitLab's projects, variables, protected_branches/protected_tags, environments
// and deployments APIs). The core reads what a job and a new pipeline need of a project
// through its own narrow builds.ProjectReader; it never imports this package.
package projects

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
	"github.com/jobapi/jobapi/gitremote"
)

// Namespace is the one namespace jobapi has: a project's GitLab path is jobapi/<path>
// (CI_PROJECT_PATH, web_url), and the API and the web UI take it for the project.
const Namespace = "jobapi"

// ProjectChange is a create or update: nil fields are left as they are (or defaulted).
type ProjectChange struct {
	Name          *string
	Path          *string
	RepoURL       *string
	DefaultBranch *string
	CIConfigPath  *string
}

// VariableChange is a variable create or update: nil fields are left as they are.
type VariableChange struct {
	Value        *string
	Masked       *bool
	Protected    *bool
	VariableType *string
	// Guard, when set, sees the variable as stored before an update changes it, under the
	// update's lock: its error refuses the update (who may change a protected variable).
	Guard func(old builds.ProjectVariable) error
}

// ErrProjectBusy: a project with unfinished pipelines cannot be deleted.
var ErrProjectBusy = errors.New("the project has unfinished pipelines; cancel them first")

var (
	projectPathPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$`)
	variableKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)
	// scpLikeRemote is git's user@host:path form (no scheme).
	scpLikeRemote = regexp.MustCompile(`^(?:[A-Za-z0-9._~-]+@)?[A-Za-z0-9.-]+:[A-Za-z0-9._~+-][A-Za-z0-9._~/+-]*$`)
)

// maxVariableValue bounds a variable's value (GitLab allows 10,000 characters).
const maxVariableValue = 10_000

// newProject applies a create request: name is required, path defaults to a slug of it,
// default_branch to main.
func newProject(c ProjectChange) (builds.Project, error) {
	var p builds.Project
	if c.Name == nil || strings.TrimSpace(*c.Name) == "" {
		return p, &builds.ValidationError{Msg: "name is required"}
	}
	p.DefaultBranch = "main"
	if c.Path == nil {
		slug := slugify(*c.Name)
		c.Path = &slug
	}
	return p, applyProject(&p, c)
}

func slugify(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(name)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-.")
}

func applyProject(p *builds.Project, c ProjectChange) error {
	if c.Name != nil {
		name := strings.TrimSpace(*c.Name)
		if name == "" || len(name) > 255 {
			return &builds.ValidationError{Msg: "name must be 1 to 255 characters"}
		}
		p.Name = name
	}
	if c.Path != nil {
		if !projectPathPattern.MatchString(*c.Path) || strings.HasSuffix(*c.Path, ".git") {
			return &builds.ValidationError{Msg: fmt.Sprintf("path %.60q must be 1 to 255 letters, digits, _ . or -, not ending in .git", *c.Path)}
		}
		p.Path = *c.Path
	}
	if c.RepoURL != nil {
		u := strings.TrimSpace(*c.RepoURL)
		if err := ValidateRepoURL(u); err != nil {
			return err
		}
		p.RepoURL = u
	}
	if c.DefaultBranch != nil {
		if err := gitref.CheckName("default_branch", *c.DefaultBranch); err != nil {
			return &builds.ValidationError{Msg: err.Error()}
		}
		p.DefaultBranch = *c.DefaultBranch
	}
	if c.CIConfigPath != nil {
		if err := CheckCIConfigPath(*c.CIConfigPath); err != nil {
			return err
		}
		p.CIConfigPath = *c.CIConfigPath
	}
	return nil
}

// CheckCIConfigPath accepts a ci_config_path that names a file in the project's own
// repository ("" is the default, .gitlab-ci.yml). GitLab's other forms, a file of another
// project (path@group/project) and a URL, are refused by name rather than read as a path
// that is never there; and since the path reaches git, it may not start with '-' or climb
// out of the tree.
func CheckCIConfigPath(s string) error {
	switch {
	case s == "":
		return nil
	case len(s) > builds.MaxNameLength:
		return invalidf("ci_config_path is longer than %d characters", builds.MaxNameLength)
	case strings.Contains(s, "://"):
		return invalidf("ci_config_path %.60q: a URL is not supported by jobapi; give a path in the project's repository", s)
	case strings.Contains(s, "@"):
		return invalidf("ci_config_path %.60q: a file of another project (path@group/project) is not supported by jobapi; give a path in the project's repository", s)
	case strings.HasPrefix(s, "-"), strings.HasPrefix(s, "/"), strings.HasSuffix(s, "/"):
		return invalidf("ci_config_path %.60q must be a relative file path, not starting with '-' or '/'", s)
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || r == ':' || r == '\\' {
			return invalidf("ci_config_path %.60q contains %q", s, r)
		}
	}
	for _, part := range strings.Split(s, "/") {
		if part == "" || part == "." || part == ".." {
			return invalidf("ci_config_path %.60q has an empty, '.' or '..' part", s)
		}
	}
	return nil
}

// ValidateRepoURL accepts what git clone accepts as a remote: https, http, ssh, git and
// file URLs, and the scp-like user@host:path form. "" means no repository.
func ValidateRepoURL(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 2048 || strings.ContainsAny(s, " \t\r\n\x00") {
		return &builds.ValidationError{Msg: "repo_url must be a git remote URL of at most 2048 characters without spaces"}
	}
	if !strings.Contains(s, "://") {
		if scpLikeRemote.MatchString(s) {
			return nil
		}
		return &builds.ValidationError{Msg: "repo_url must be an https://, http://, ssh://, git:// or file:// URL, or user@host:path"}
	}
	u, err := url.Parse(s)
	if err != nil {
		return &builds.ValidationError{Msg: "repo_url is not a valid URL"}
	}
	switch strings.ToLower(u.Scheme) {
	case "https", "http", "ssh", "git", "git+ssh":
		if u.Host == "" {
			return &builds.ValidationError{Msg: "repo_url has no host"}
		}
	case "file":
		if u.Path == "" || u.Host != "" && u.Host != "localhost" {
			return &builds.ValidationError{Msg: "a file:// repo_url needs an absolute path (file:///srv/repo.git)"}
		}
	default:
		return &builds.ValidationError{Msg: fmt.Sprintf("repo_url scheme %.20q is not a git transport (https, http, ssh, git, file)", u.Scheme)}
	}
	return nil
}

// newVariable validates a variable create.
func newVariable(key string, c VariableChange) (builds.ProjectVariable, error) {
	v := builds.ProjectVariable{Key: key, VariableType: builds.VariableEnv}
	if !variableKeyPattern.MatchString(key) {
		return v, &builds.ValidationError{Msg: fmt.Sprintf("key %.60q must be 1 to 255 letters, digits or _", key)}
	}
	if c.Value == nil {
		return v, &builds.ValidationError{Msg: "value is required"}
	}
	return v, applyVariable(&v, c)
}

func applyVariable(v *builds.ProjectVariable, c VariableChange) error {
	if c.Value != nil {
		v.Value = *c.Value
	}
	if c.Masked != nil {
		v.Masked = *c.Masked
	}
	if c.Protected != nil {
		v.Protected = *c.Protected
	}
	if c.VariableType != nil {
		switch *c.VariableType {
		case builds.VariableEnv, builds.VariableFile:
			v.VariableType = *c.VariableType
		default:
			return &builds.ValidationError{Msg: fmt.Sprintf("variable_type must be env_var or file, got %.20q", *c.VariableType)}
		}
	}
	if len(v.Value) > maxVariableValue {
		return &builds.ValidationError{Msg: fmt.Sprintf("value is longer than %d characters", maxVariableValue)}
	}
	if v.Masked && (len(v.Value) < builds.MinMaskedLength || strings.ContainsAny(v.Value, "\r\n")) {
		// GitLab's rule: a masked value must be findable in the log as one token.
		return &builds.ValidationError{Msg: fmt.Sprintf("value cannot be masked: it must be at least %d characters on one line", builds.MinMaskedLength)}
	}
	return nil
}

// Store holds projects, their variables, their protected refs, and the environments and
// deployments their pipelines recorded (Postgres).
type Store interface {
	ProtectedRefStore
	EnvironmentStore
	// CreateProject: builds.ErrExists when the path is taken.
	CreateProject(ctx context.Context, p builds.Project) (builds.Project, error)
	// Project: builds.ErrNotFound.
	Project(ctx context.Context, id int64) (builds.Project, error)
	Projects(ctx context.Context, p builds.Page) ([]builds.Project, int, error)
	// ProjectByPath: builds.ErrNotFound.
	ProjectByPath(ctx context.Context, path string) (builds.Project, error)
	// UpdateProject applies change to the project in one transaction (the row is locked
	// while apply validates). builds.ErrNotFound, builds.ErrExists, or apply's error.
	UpdateProject(ctx context.Context, id int64, apply func(*builds.Project) error, now time.Time) (builds.Project, error)
	// DeleteProject: builds.ErrNotFound, ErrProjectBusy while a pipeline of it is
	// unfinished.
	DeleteProject(ctx context.Context, id int64) error

	// ProjectVariables lists a project's variables by key. builds.ErrNotFound for no
	// project.
	ProjectVariables(ctx context.Context, projectID int64) ([]builds.ProjectVariable, error)
	// CreateProjectVariable: builds.ErrNotFound (project), builds.ErrExists (key).
	CreateProjectVariable(ctx context.Context, projectID int64, v builds.ProjectVariable) error
	// UpdateProjectVariable: builds.ErrNotFound (project or key), or apply's error.
	UpdateProjectVariable(ctx context.Context, projectID int64, key string, apply func(*builds.ProjectVariable) error) (builds.ProjectVariable, error)
	// DeleteProjectVariable: builds.ErrNotFound (project or key).
	DeleteProjectVariable(ctx context.Context, projectID int64, key string) error
}

// Deps are what a Service is built from; both are required.
type Deps struct {
	// Builds is the core: its clock and its audit log of operator actions.
	Builds *builds.Service
	Store  Store
}

// Service manages projects and what is set on them.
type Service struct {
	builds *builds.Service
	store  Store
}

// New wires the service. It panics when a required dependency is missing: production
// always gives them, and a service without one would fail later and further away.
func New(d Deps) *Service {
	switch {
	case d.Builds == nil:
		panic("projects.New: Deps.Builds is required")
	case d.Store == nil:
		panic("projects.New: Deps.Store is required")
	}
	return &Service{builds: d.Builds, store: d.Store}
}

// CreateProject validates and stores a project.
func (s *Service) CreateProject(ctx context.Context, c ProjectChange) (builds.Project, error) {
	p, err := newProject(c)
	if err != nil {
		return builds.Project{}, err
	}
	now := s.builds.Now()
	p.CreatedAt, p.UpdatedAt = now, now
	created, err := s.store.CreateProject(ctx, p)
	if err != nil {
		return builds.Project{}, err
	}
	s.builds.RecordAudit(ctx, "project_created", projectTarget(created.ID), projectDetail(created))
	return created, nil
}

// Project returns one project.
func (s *Service) Project(ctx context.Context, id int64) (builds.Project, error) {
	return s.store.Project(ctx, id)
}

// ProjectByPath returns the project of a path (GitLab's "namespace/path" without the
// namespace), as scripts and links name a project.
func (s *Service) ProjectByPath(ctx context.Context, path string) (builds.Project, error) {
	return s.store.ProjectByPath(ctx, path)
}

// implicitPath is the path of a project that has pipelines but no row (CI_PROJECT_PATH
// names it so): project-<id>.
var implicitPath = regexp.MustCompile(`^project-([1-9][0-9]{0,18})$`)

// IDByPath is the id of the project a path names, as GitLab's API paths and links name
// projects: its row's, or an implicit project's (project-<id>, which has none); found is
// false for a path no project has.
func (s *Service) IDByPath(ctx context.Context, path string) (id int64, found bool, err error) {
	p, err := s.store.ProjectByPath(ctx, path)
	switch {
	case err == nil:
		return p.ID, true, nil
	case !errors.Is(err, builds.ErrNotFound):
		return 0, false, err
	}
	if m := implicitPath.FindStringSubmatch(path); m != nil {
		if id, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			return id, true, nil
		}
	}
	return 0, false, nil
}

// Projects lists projects by id.
func (s *Service) Projects(ctx context.Context, p builds.Page) ([]builds.Project, int, error) {
	return s.store.Projects(ctx, p)
}

// UpdateProject changes a project's settings.
func (s *Service) UpdateProject(ctx context.Context, id int64, c ProjectChange) (builds.Project, error) {
	now := s.builds.Now()
	p, err := s.store.UpdateProject(ctx, id, func(p *builds.Project) error { return applyProject(p, c) }, now)
	if err != nil {
		return builds.Project{}, err
	}
	s.builds.RecordAudit(ctx, "project_updated", projectTarget(id), projectDetail(p))
	return p, nil
}

// DeleteProject removes a project and its variables; its finished pipelines stay, as an
// implicit project's.
func (s *Service) DeleteProject(ctx context.Context, id int64) error {
	if err := s.store.DeleteProject(ctx, id); err != nil {
		return err
	}
	s.builds.RecordAudit(ctx, "project_deleted", projectTarget(id), nil)
	return nil
}

// ProjectVariables lists a project's variables.
func (s *Service) ProjectVariables(ctx context.Context, projectID int64) ([]builds.ProjectVariable, error) {
	return s.store.ProjectVariables(ctx, projectID)
}

// ProjectVariable returns one variable.
func (s *Service) ProjectVariable(ctx context.Context, projectID int64, key string) (builds.ProjectVariable, error) {
	vars, err := s.store.ProjectVariables(ctx, projectID)
	if err != nil {
		return builds.ProjectVariable{}, err
	}
	for _, v := range vars {
		if v.Key == key {
			return v, nil
		}
	}
	return builds.ProjectVariable{}, fmt.Errorf("variable %.60q: %w", key, builds.ErrNotFound)
}

// CreateProjectVariable validates and stores a variable.
func (s *Service) CreateProjectVariable(ctx context.Context, projectID int64, key string, c VariableChange) (builds.ProjectVariable, error) {
	v, err := newVariable(key, c)
	if err != nil {
		return builds.ProjectVariable{}, err
	}
	if err := s.store.CreateProjectVariable(ctx, projectID, v); err != nil {
		return builds.ProjectVariable{}, err
	}
	s.builds.RecordAudit(ctx, "variable_created", projectTarget(projectID), variableDetail(v))
	return v, nil
}

// UpdateProjectVariable changes a variable.
func (s *Service) UpdateProjectVariable(ctx context.Context, projectID int64, key string, c VariableChange) (builds.ProjectVariable, error) {
	v, err := s.store.UpdateProjectVariable(ctx, projectID, key, func(v *builds.ProjectVariable) error {
		if c.Guard != nil {
			if err := c.Guard(*v); err != nil {
				return err
			}
		}
		return applyVariable(v, c)
	})
	if err != nil {
		return builds.ProjectVariable{}, err
	}
	s.builds.RecordAudit(ctx, "variable_updated", projectTarget(projectID), variableDetail(v))
	return v, nil
}

// DeleteProjectVariable removes a variable.
func (s *Service) DeleteProjectVariable(ctx context.Context, projectID int64, key string) error {
	if err := s.store.DeleteProjectVariable(ctx, projectID, key); err != nil {
		return err
	}
	s.builds.RecordAudit(ctx, "variable_deleted", projectTarget(projectID), map[string]any{"key": key})
	return nil
}

func projectTarget(id int64) string { return fmt.Sprintf("project:%d", id) }

// projectDetail is what the audit log keeps of a project: the remote redacted.
func projectDetail(p builds.Project) map[string]any {
	return map[string]any{"name": p.Name, "path": p.Path, "repo_url": gitremote.Redact(p.RepoURL), "default_branch": p.DefaultBranch,
		"ci_config_path": p.CIConfigPath}
}

// variableDetail never holds the value: masked or not, a variable may be a secret.
func variableDetail(v builds.ProjectVariable) map[string]any {
	return map[string]any{"key": v.Key, "masked": v.Masked, "protected": v.Protected, "variable_type": v.VariableType}
}

func invalidf(format string, args ...any) error {
	return &builds.ValidationError{Msg: fmt.Sprintf(format, args...)}
}
