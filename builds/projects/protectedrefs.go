package projects

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
)

// Protected refs, as an operator sets them (GitLab's protected_branches and protected_tags):
// a project protects branches and tags by name or wildcard pattern. What protection means
// for a pipeline (builds.RefProtected, decided at its creation from
// builds.JobProject.Protected) is the core's.

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
		return p, &builds.ValidationError{Msg: "name is missing"}
	}
	// A pattern is a ref name with * in it: git's rules (gitref.CheckName's), * taken for a letter.
	if name := *c.Name; gitref.NameProblem(strings.ReplaceAll(name, "*", "x")) != "" {
		return p, &builds.ValidationError{Msg: fmt.Sprintf("name %.60q is not a valid %s name or pattern: %s",
			name, refType, gitref.NameProblem(strings.ReplaceAll(name, "*", "x")))}
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
			return p, &builds.ValidationError{Msg: fmt.Sprintf("%s must be 0, 30, 40 or 60, got %d", f.field, *f.in)}
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

// ProtectedRefStore holds protected refs (Postgres).
type ProtectedRefStore interface {
	// ProtectedRefs lists a project's protected refs of a type by name. builds.ErrNotFound:
	// no project.
	ProtectedRefs(ctx context.Context, projectID int64, refType string) ([]ProtectedRef, error)
	// CreateProtectedRef: builds.ErrNotFound (project), builds.ErrExists (the name is
	// protected already).
	CreateProtectedRef(ctx context.Context, p ProtectedRef) (ProtectedRef, error)
	// DeleteProtectedRef: builds.ErrNotFound (project or name).
	DeleteProtectedRef(ctx context.Context, projectID int64, refType, name string) error
}

// ProtectedRefs lists a project's protected branches or tags.
func (s *Service) ProtectedRefs(ctx context.Context, projectID int64, refType string) ([]ProtectedRef, error) {
	return s.store.ProtectedRefs(ctx, projectID, refType)
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
	return ProtectedRef{}, fmt.Errorf("protected %s %.60q: %w", refType, name, builds.ErrNotFound)
}

// CreateProtectedRef protects a branch or tag name (pattern). Pipelines created from now on
// see it; those that exist keep what they were created with.
func (s *Service) CreateProtectedRef(ctx context.Context, projectID int64, refType string, c ProtectedRefChange) (ProtectedRef, error) {
	p, err := newProtectedRef(refType, c)
	if err != nil {
		return ProtectedRef{}, err
	}
	p.ProjectID, p.CreatedAt = projectID, s.builds.Now()
	created, err := s.store.CreateProtectedRef(ctx, p)
	if err != nil {
		return ProtectedRef{}, err
	}
	s.builds.RecordAudit(ctx, "protected_"+refType+"_created", projectTarget(projectID), map[string]any{"name": created.Name})
	return created, nil
}

// DeleteProtectedRef unprotects a branch or tag name (pattern).
func (s *Service) DeleteProtectedRef(ctx context.Context, projectID int64, refType, name string) error {
	if err := s.store.DeleteProtectedRef(ctx, projectID, refType, name); err != nil {
		return err
	}
	s.builds.RecordAudit(ctx, "protected_"+refType+"_deleted", projectTarget(projectID), map[string]any{"name": name})
	return nil
}
