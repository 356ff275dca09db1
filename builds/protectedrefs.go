package builds

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Protected refs. A project protects branches and tags by name or wildcard
// pattern, as GitLab's protected_branches and protected_tags. Whether a pipeline's ref is
// protected is decided when the pipeline is created and kept on it and its builds (GitLab's
// ci_pipelines.protected): it gives the jobs CI_COMMIT_REF_PROTECTED, the project's protected
// variables and the -protected cache key suffix, and only such builds go to runners whose
// access_level is ref_protected.

// Runner access levels, GitLab's: a ref_protected runner takes only builds of protected refs.
const (
	AccessNotProtected = "not_protected"
	AccessRefProtected = "ref_protected"
)

// ValidAccessLevel reports whether s is a runner access_level.
func ValidAccessLevel(s string) bool { return s == AccessNotProtected || s == AccessRefProtected }

// ProtectedOnly reports whether the runner takes only builds of protected refs.
func (r Runner) ProtectedOnly() bool { return r.AccessLevel == AccessRefProtected }

// Ref types of a protected ref.
const (
	RefBranch = "branch"
	RefTag    = "tag"
)

// ProtectedRef is one protected branch or tag of a project. The access levels are GitLab's
// (0 no one, 30 developers, 40 maintainers, 60 admins); jobapi keeps and shows them, and the
// ref's protection is what it acts on.
type ProtectedRef struct {
	ID                        int64
	ProjectID                 int64
	RefType                   string // RefBranch or RefTag
	Name                      string // a name or a pattern with * (release/*)
	PushAccessLevel           int
	MergeAccessLevel          int
	CreateAccessLevel         int
	AllowForcePush            bool
	CodeOwnerApprovalRequired bool
	CreatedAt                 time.Time
}

// ProtectedRefChange is a create request; nil fields take GitLab's defaults (maintainers).
type ProtectedRefChange struct {
	Name                      *string
	PushAccessLevel           *int
	MergeAccessLevel          *int
	CreateAccessLevel         *int
	AllowForcePush            *bool
	CodeOwnerApprovalRequired *bool
}

// AccessLevelMaintainer is GitLab's default for who may push, merge and create.
const AccessLevelMaintainer = 40

// accessLevels are the levels GitLab accepts for a protected ref, with its descriptions.
var accessLevels = map[int]string{0: "No one", 30: "Developers + Maintainers", 40: "Maintainers", 60: "Admins"}

// AccessLevelDescription is GitLab's access_level_description of a level.
func AccessLevelDescription(level int) string { return accessLevels[level] }

// newProtectedRef validates a create request for a ref type.
func newProtectedRef(refType string, c ProtectedRefChange) (ProtectedRef, error) {
	p := ProtectedRef{RefType: refType, PushAccessLevel: AccessLevelMaintainer, MergeAccessLevel: AccessLevelMaintainer,
		CreateAccessLevel: AccessLevelMaintainer}
	if c.Name == nil || *c.Name == "" {
		return p, &ValidationError{Msg: "name is missing"}
	}
	// A pattern is a ref name with * in it: git's rules (CheckRefName's), * taken for a letter.
	if name := *c.Name; refNameProblem(strings.ReplaceAll(name, "*", "x")) != "" {
		return p, &ValidationError{Msg: fmt.Sprintf("name %.60q is not a valid %s name or pattern: %s",
			name, refType, refNameProblem(strings.ReplaceAll(name, "*", "x")))}
	}
	p.Name = *c.Name
	for _, f := range []struct {
		field string
		in    *int
		out   *int
	}{{"push_access_level", c.PushAccessLevel, &p.PushAccessLevel}, {"merge_access_level", c.MergeAccessLevel, &p.MergeAccessLevel},
		{"create_access_level", c.CreateAccessLevel, &p.CreateAccessLevel}} {
		if f.in == nil {
			continue
		}
		if _, ok := accessLevels[*f.in]; !ok {
			return p, &ValidationError{Msg: fmt.Sprintf("%s must be 0, 30, 40 or 60, got %d", f.field, *f.in)}
		}
		*f.out = *f.in
	}
	if c.AllowForcePush != nil {
		p.AllowForcePush = *c.AllowForcePush
	}
	if c.CodeOwnerApprovalRequired != nil {
		p.CodeOwnerApprovalRequired = *c.CodeOwnerApprovalRequired
	}
	return p, nil
}

// ProtectedRefNames are a project's protected branch and tag names and patterns.
type ProtectedRefNames struct {
	Branches []string
	Tags     []string
}

// implicitProtectedBranch is the one protected ref of a project id without a row: its
// default branch, as before projects had a list.
const implicitProtectedBranch = "main"

// RefProtected reports whether ref ("main", "refs/heads/main", "refs/tags/v1") is protected
// by names; nil names is an implicit project's (no row): only its default branch, main.
func RefProtected(ref string, names *ProtectedRefNames) bool {
	name, tag := SplitRef(ref)
	if names == nil {
		return !tag && name == implicitProtectedBranch
	}
	patterns := names.Branches
	if tag {
		patterns = names.Tags
	}
	for _, p := range patterns {
		if RefMatches(p, name) {
			return true
		}
	}
	return false
}

// SplitRef is a pipeline ref's name and whether it is a tag.
func SplitRef(ref string) (name string, tag bool) {
	if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return t, true
	}
	return strings.TrimPrefix(ref, "refs/heads/"), false
}

// RefMatches is GitLab's ProtectedRefMatcher: the name itself, or a pattern in which each *
// stands for any characters, / included (release/* matches release/1.0 and release/a/b).
func RefMatches(pattern, name string) bool {
	if pattern == name {
		return true
	}
	if !strings.Contains(pattern, "*") {
		return false
	}
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`\A` + strings.Join(parts, ".*") + `\z`).MatchString(name)
}

// ProtectedRefStore holds protected refs (Postgres).
type ProtectedRefStore interface {
	// ProtectedRefs lists a project's protected refs of a type by name. ErrNotFound: no project.
	ProtectedRefs(ctx context.Context, projectID int64, refType string) ([]ProtectedRef, error)
	// CreateProtectedRef: ErrNotFound (project), ErrExists (the name is protected already).
	CreateProtectedRef(ctx context.Context, p ProtectedRef) (ProtectedRef, error)
	// DeleteProtectedRef: ErrNotFound (project or name).
	DeleteProtectedRef(ctx context.Context, projectID int64, refType, name string) error
}

// ProtectedRefs lists a project's protected branches or tags.
func (s *Service) ProtectedRefs(ctx context.Context, projectID int64, refType string) ([]ProtectedRef, error) {
	if s.projects == nil {
		return nil, fmt.Errorf("project %d: %w", projectID, ErrNotFound)
	}
	return s.projects.ProtectedRefs(ctx, projectID, refType)
}

// ProtectedRef returns one protected branch or tag by its name (pattern).
func (s *Service) ProtectedRef(ctx context.Context, projectID int64, refType, name string) (ProtectedRef, error) {
	list, err := s.ProtectedRefs(ctx, projectID, refType)
	if err != nil {
		return ProtectedRef{}, err
	}
	for _, p := range list {
		if p.Name == name {
			return p, nil
		}
	}
	return ProtectedRef{}, fmt.Errorf("protected %s %.60q: %w", refType, name, ErrNotFound)
}

// CreateProtectedRef protects a branch or tag name (pattern). Pipelines created from now on
// see it; those that exist keep what they were created with.
func (s *Service) CreateProtectedRef(ctx context.Context, projectID int64, refType string, c ProtectedRefChange, actor string) (ProtectedRef, error) {
	p, err := newProtectedRef(refType, c)
	if err != nil {
		return ProtectedRef{}, err
	}
	if s.projects == nil {
		return ProtectedRef{}, fmt.Errorf("project %d: %w", projectID, ErrNotFound)
	}
	p.ProjectID, p.CreatedAt = projectID, s.now()
	created, err := s.projects.CreateProtectedRef(ctx, p)
	if err != nil {
		return ProtectedRef{}, err
	}
	s.audit(ctx, actor, "protected_"+refType+"_created", projectTarget(projectID), map[string]any{"name": created.Name})
	return created, nil
}

// DeleteProtectedRef unprotects a branch or tag name (pattern).
func (s *Service) DeleteProtectedRef(ctx context.Context, projectID int64, refType, name, actor string) error {
	if s.projects == nil {
		return fmt.Errorf("project %d: %w", projectID, ErrNotFound)
	}
	if err := s.projects.DeleteProtectedRef(ctx, projectID, refType, name); err != nil {
		return err
	}
	s.audit(ctx, actor, "protected_"+refType+"_deleted", projectTarget(projectID), map[string]any{"name": name})
	return nil
}
