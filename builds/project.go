package builds

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Project is a project that owns a repository. A pipeline may name a project id that has no
// row: that implicit project has no repository, and its jobs run with GIT_STRATEGY=none.
type Project struct {
	ID   int64
	Name string
	Path string
	// RepoURL is the git remote as the operator gave it, credentials included: only the job
	// payload carries it so. Show RedactURL(RepoURL) anywhere else.
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
}

// ErrExists: a project path or a variable key is taken.
var ErrExists = errors.New("already exists")

// ErrProjectBusy: a project with unfinished pipelines cannot be deleted.
var ErrProjectBusy = errors.New("the project has unfinished pipelines; cancel them first")

// JobProject is what a job payload needs of its project: nil Project for an implicit one.
type JobProject struct {
	Project   *Project
	Variables []ProjectVariable
	// Protected are the project's protected refs, as a new pipeline's rules see them
	// (ProjectStore.JobProject reads them; the claim does not: its build carries the answer).
	Protected ProtectedRefNames
}

// RefProtected reports whether a pipeline on ref would be protected (see RefProtected).
func (p JobProject) RefProtected(ref string) bool {
	if p.Project == nil {
		return RefProtected(ref, nil)
	}
	return RefProtected(ref, &p.Protected)
}

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
func newProject(c ProjectChange) (Project, error) {
	var p Project
	if c.Name == nil || strings.TrimSpace(*c.Name) == "" {
		return p, &ValidationError{Msg: "name is required"}
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

func applyProject(p *Project, c ProjectChange) error {
	if c.Name != nil {
		name := strings.TrimSpace(*c.Name)
		if name == "" || len(name) > 255 {
			return &ValidationError{Msg: "name must be 1 to 255 characters"}
		}
		p.Name = name
	}
	if c.Path != nil {
		if !projectPathPattern.MatchString(*c.Path) || strings.HasSuffix(*c.Path, ".git") {
			return &ValidationError{Msg: fmt.Sprintf("path %.60q must be 1 to 255 letters, digits, _ . or -, not ending in .git", *c.Path)}
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
		if err := CheckRefName("default_branch", *c.DefaultBranch); err != nil {
			return err
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
	case len(s) > MaxNameLength:
		return invalid("ci_config_path is longer than %d characters", MaxNameLength)
	case strings.Contains(s, "://"):
		return invalid("ci_config_path %.60q: a URL is not supported by jobapi; give a path in the project's repository", s)
	case strings.Contains(s, "@"):
		return invalid("ci_config_path %.60q: a file of another project (path@group/project) is not supported by jobapi; give a path in the project's repository", s)
	case strings.HasPrefix(s, "-"), strings.HasPrefix(s, "/"), strings.HasSuffix(s, "/"):
		return invalid("ci_config_path %.60q must be a relative file path, not starting with '-' or '/'", s)
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || r == ':' || r == '\\' {
			return invalid("ci_config_path %.60q contains %q", s, r)
		}
	}
	for _, part := range strings.Split(s, "/") {
		if part == "" || part == "." || part == ".." {
			return invalid("ci_config_path %.60q has an empty, '.' or '..' part", s)
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
		return &ValidationError{Msg: "repo_url must be a git remote URL of at most 2048 characters without spaces"}
	}
	if !strings.Contains(s, "://") {
		if scpLikeRemote.MatchString(s) {
			return nil
		}
		return &ValidationError{Msg: "repo_url must be an https://, http://, ssh://, git:// or file:// URL, or user@host:path"}
	}
	u, err := url.Parse(s)
	if err != nil {
		return &ValidationError{Msg: "repo_url is not a valid URL"}
	}
	switch strings.ToLower(u.Scheme) {
	case "https", "http", "ssh", "git", "git+ssh":
		if u.Host == "" {
			return &ValidationError{Msg: "repo_url has no host"}
		}
	case "file":
		if u.Path == "" || u.Host != "" && u.Host != "localhost" {
			return &ValidationError{Msg: "a file:// repo_url needs an absolute path (file:///srv/repo.git)"}
		}
	default:
		return &ValidationError{Msg: fmt.Sprintf("repo_url scheme %.20q is not a git transport (https, http, ssh, git, file)", u.Scheme)}
	}
	return nil
}

// RedactURL hides the credentials of a remote. An http(s) username is hidden too: it is
// often the token itself (https://<token>@host/…). Other schemes keep the user (ssh://git@…)
// and lose only a password.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") {
		// scp-like user:password@host:path: git takes "user:password" for the ssh user.
		if at := strings.Index(s, "@"); at > 0 {
			if user, _, ok := strings.Cut(s[:at], ":"); ok && !strings.Contains(s[:at], "/") {
				return user + ":*****" + s[at:]
			}
		}
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		// Unparseable yet stored (never, as validated): show nothing of it.
		return "*****"
	}
	if u.User == nil {
		return s
	}
	_, hasPassword := u.User.Password()
	switch {
	case u.Scheme == "https" || u.Scheme == "http":
		if hasPassword {
			u.User = url.UserPassword("*****", "*****")
		} else {
			u.User = url.User("*****")
		}
	case hasPassword:
		u.User = url.UserPassword(u.User.Username(), "*****")
	default:
		return s
	}
	// url.String escapes the asterisks; put them back so the redaction reads plainly.
	return strings.ReplaceAll(u.String(), "%2A", "*")
}

// newVariable validates a variable create.
func newVariable(key string, c VariableChange) (ProjectVariable, error) {
	v := ProjectVariable{Key: key, VariableType: VariableEnv}
	if !variableKeyPattern.MatchString(key) {
		return v, &ValidationError{Msg: fmt.Sprintf("key %.60q must be 1 to 255 letters, digits or _", key)}
	}
	if c.Value == nil {
		return v, &ValidationError{Msg: "value is required"}
	}
	return v, applyVariable(&v, c)
}

func applyVariable(v *ProjectVariable, c VariableChange) error {
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
		case VariableEnv, VariableFile:
			v.VariableType = *c.VariableType
		default:
			return &ValidationError{Msg: fmt.Sprintf("variable_type must be env_var or file, got %.20q", *c.VariableType)}
		}
	}
	if len(v.Value) > maxVariableValue {
		return &ValidationError{Msg: fmt.Sprintf("value is longer than %d characters", maxVariableValue)}
	}
	if v.Masked && (len(v.Value) < minMaskedLength || strings.ContainsAny(v.Value, "\r\n")) {
		// GitLab's rule: a masked value must be findable in the log as one token.
		return &ValidationError{Msg: fmt.Sprintf("value cannot be masked: it must be at least %d characters on one line", minMaskedLength)}
	}
	return nil
}

// ProjectStore holds projects and their variables (Postgres).
type ProjectStore interface {
	ProtectedRefStore
	// CreateProject: ErrExists when the path is taken.
	CreateProject(ctx context.Context, p Project) (Project, error)
	// Project: ErrNotFound.
	Project(ctx context.Context, id int64) (Project, error)
	Projects(ctx context.Context, p Page) ([]Project, int, error)
	// UpdateProject applies change to the project in one transaction (the row is locked
	// while apply validates). ErrNotFound, ErrExists, or apply's error.
	UpdateProject(ctx context.Context, id int64, apply func(*Project) error, now time.Time) (Project, error)
	// DeleteProject: ErrNotFound, ErrProjectBusy while a pipeline of it is unfinished.
	DeleteProject(ctx context.Context, id int64) error

	// ProjectVariables lists a project's variables by key. ErrNotFound for no project.
	ProjectVariables(ctx context.Context, projectID int64) ([]ProjectVariable, error)
	// CreateProjectVariable: ErrNotFound (project), ErrExists (key).
	CreateProjectVariable(ctx context.Context, projectID int64, v ProjectVariable) error
	// UpdateProjectVariable: ErrNotFound (project or key), or apply's error.
	UpdateProjectVariable(ctx context.Context, projectID int64, key string, apply func(*ProjectVariable) error) (ProjectVariable, error)
	// DeleteProjectVariable: ErrNotFound (project or key).
	DeleteProjectVariable(ctx context.Context, projectID int64, key string) error
	// JobProject reads a project and its variables in one round trip; a project id without
	// a row gives a zero JobProject and no error.
	JobProject(ctx context.Context, projectID int64) (JobProject, error)
}

// CreateProject validates and stores a project.
func (s *Service) CreateProject(ctx context.Context, c ProjectChange, actor string) (Project, error) {
	p, err := newProject(c)
	if err != nil {
		return Project{}, err
	}
	now := s.now()
	p.CreatedAt, p.UpdatedAt = now, now
	created, err := s.projects.CreateProject(ctx, p)
	if err != nil {
		return Project{}, err
	}
	s.audit(ctx, actor, "project_created", projectTarget(created.ID), projectDetail(created))
	return created, nil
}

// Project returns one project.
func (s *Service) Project(ctx context.Context, id int64) (Project, error) {
	return s.projects.Project(ctx, id)
}

// Projects lists projects by id.
func (s *Service) Projects(ctx context.Context, p Page) ([]Project, int, error) {
	return s.projects.Projects(ctx, p)
}

// UpdateProject changes a project's settings.
func (s *Service) UpdateProject(ctx context.Context, id int64, c ProjectChange, actor string) (Project, error) {
	now := s.now()
	p, err := s.projects.UpdateProject(ctx, id, func(p *Project) error { return applyProject(p, c) }, now)
	if err != nil {
		return Project{}, err
	}
	s.audit(ctx, actor, "project_updated", projectTarget(id), projectDetail(p))
	return p, nil
}

// DeleteProject removes a project and its variables; its finished pipelines stay, as an
// implicit project's.
func (s *Service) DeleteProject(ctx context.Context, id int64, actor string) error {
	if err := s.projects.DeleteProject(ctx, id); err != nil {
		return err
	}
	s.audit(ctx, actor, "project_deleted", projectTarget(id), nil)
	return nil
}

// ProjectVariables lists a project's variables.
func (s *Service) ProjectVariables(ctx context.Context, projectID int64) ([]ProjectVariable, error) {
	return s.projects.ProjectVariables(ctx, projectID)
}

// ProjectVariable returns one variable.
func (s *Service) ProjectVariable(ctx context.Context, projectID int64, key string) (ProjectVariable, error) {
	vars, err := s.projects.ProjectVariables(ctx, projectID)
	if err != nil {
		return ProjectVariable{}, err
	}
	for _, v := range vars {
		if v.Key == key {
			return v, nil
		}
	}
	return ProjectVariable{}, fmt.Errorf("variable %.60q: %w", key, ErrNotFound)
}

// CreateProjectVariable validates and stores a variable.
func (s *Service) CreateProjectVariable(ctx context.Context, projectID int64, key string, c VariableChange, actor string) (ProjectVariable, error) {
	v, err := newVariable(key, c)
	if err != nil {
		return ProjectVariable{}, err
	}
	if err := s.projects.CreateProjectVariable(ctx, projectID, v); err != nil {
		return ProjectVariable{}, err
	}
	s.audit(ctx, actor, "variable_created", projectTarget(projectID), variableDetail(v))
	return v, nil
}

// UpdateProjectVariable changes a variable.
func (s *Service) UpdateProjectVariable(ctx context.Context, projectID int64, key string, c VariableChange, actor string) (ProjectVariable, error) {
	v, err := s.projects.UpdateProjectVariable(ctx, projectID, key, func(v *ProjectVariable) error { return applyVariable(v, c) })
	if err != nil {
		return ProjectVariable{}, err
	}
	s.audit(ctx, actor, "variable_updated", projectTarget(projectID), variableDetail(v))
	return v, nil
}

// DeleteProjectVariable removes a variable.
func (s *Service) DeleteProjectVariable(ctx context.Context, projectID int64, key string, actor string) error {
	if err := s.projects.DeleteProjectVariable(ctx, projectID, key); err != nil {
		return err
	}
	s.audit(ctx, actor, "variable_deleted", projectTarget(projectID), map[string]any{"key": key})
	return nil
}

func projectTarget(id int64) string { return fmt.Sprintf("project:%d", id) }

// projectDetail is what the audit log keeps of a project: the remote redacted.
func projectDetail(p Project) map[string]any {
	return map[string]any{"name": p.Name, "path": p.Path, "repo_url": RedactURL(p.RepoURL), "default_branch": p.DefaultBranch,
		"ci_config_path": p.CIConfigPath}
}

// variableDetail never holds the value: masked or not, a variable may be a secret.
func variableDetail(v ProjectVariable) map[string]any {
	return map[string]any{"key": v.Key, "masked": v.Masked, "protected": v.Protected, "variable_type": v.VariableType}
}

// ProjectForPipeline is a project with its variables, as a new pipeline's rules see them:
// an implicit project (no row) has neither.
func (s *Service) ProjectForPipeline(ctx context.Context, projectID int64) (JobProject, error) {
	return s.jobProject(ctx, projectID)
}

// jobProject reads a build's project for its payload and trace masking.
func (s *Service) jobProject(ctx context.Context, projectID int64) (JobProject, error) {
	if s.projects == nil {
		return JobProject{}, nil
	}
	return s.projects.JobProject(ctx, projectID)
}

// claimedProject is the project of a claimed build: the one the claim read with it, when
// the store reads it there (one statement fewer per job), else read now.
func (s *Service) claimedProject(ctx context.Context, c Claimed) (JobProject, error) {
	if s.projects == nil {
		return JobProject{}, nil
	}
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
