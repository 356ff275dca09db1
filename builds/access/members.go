package access

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/gitref"
)

// Member is a user's membership of a project, with what GitLab's members API shows of the
// user.
type Member struct {
	ProjectID int64
	UserID    int64
	Username  string
	Name      string
	// State is the user's ("active", "blocked").
	State string
	Level Level
	// ExpiresAt is a date (midnight UTC): the membership ends when that day begins, as
	// GitLab's. nil: it does not expire.
	ExpiresAt *time.Time
	CreatedAt time.Time
}

// Active reports whether the membership holds at now.
func (m Member) Active(now time.Time) bool { return m.ExpiresAt == nil || now.Before(*m.ExpiresAt) }

// MemberChange is an add (Level required) or an update (nil fields kept).
type MemberChange struct {
	Level *int
	// ExpiresAt: a pointer to nil clears the expiry on an update.
	ExpiresAt **time.Time
}

// ErrLastOwner: the change would leave the project without an owner (GitLab's 400).
var ErrLastOwner = errors.New("a project must keep at least one owner: add another owner first")

// ForbiddenError: the caller's role does not allow this change of membership (403).
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

// Store keeps project members (Postgres). Every check reads it, on every request: a
// removed member is refused at once by every replica, with nothing cached to expire.
type Store interface {
	// MemberLevel is the user's level on the project at now: NoAccess when the user is not
	// a member, its membership has expired, or there is no such project.
	MemberLevel(ctx context.Context, projectID, userID int64, now time.Time) (Level, error)
	// Members lists a project's members by user id. builds.ErrNotFound: no project.
	Members(ctx context.Context, projectID int64, query string, page builds.Page) ([]Member, int, error)
	// Member: builds.ErrNotFound (no project, or the user is no member).
	Member(ctx context.Context, projectID, userID int64) (Member, error)
	// AddMember: builds.ErrNotFound (no project or no user), builds.ErrExists (a member
	// already).
	AddMember(ctx context.Context, m Member) (Member, error)
	// UpdateMember calls apply with the member and the project's number of owners, the
	// project's members locked, and stores what apply left (one transaction: two changes
	// of one project never both see the owner they each remove). builds.ErrNotFound, or
	// apply's error.
	UpdateMember(ctx context.Context, projectID, userID int64, apply func(m *Member, owners int) error) (Member, error)
	// RemoveMember is UpdateMember's twin for a removal: check sees the member and the
	// owners, and its error keeps the row.
	RemoveMember(ctx context.Context, projectID, userID int64, check func(m Member, owners int) error) error
	// MemberProjects lists the projects the user is an active member of at now, by id.
	MemberProjects(ctx context.Context, userID int64, now time.Time, page builds.Page) ([]builds.Project, int, error)
}

// Deps are what a Service is built from; all are required.
type Deps struct {
	// Builds is the core: its clock and its audit log.
	Builds *builds.Service
	Store  Store
	// Refs are the projects' protected branches and tags (the protected-ref rule).
	Refs projects.ProtectedRefStore
}

// Service keeps project members and decides what callers may do.
type Service struct {
	builds *builds.Service
	store  Store
	refs   projects.ProtectedRefStore
}

// New wires the service; it panics when a dependency is missing.
func New(d Deps) *Service {
	switch {
	case d.Builds == nil:
		panic("access.New: Deps.Builds is required")
	case d.Store == nil:
		panic("access.New: Deps.Store is required")
	case d.Refs == nil:
		panic("access.New: Deps.Refs is required")
	}
	return &Service{builds: d.Builds, store: d.Store, refs: d.Refs}
}

// Level is the actor's level on a project, read from the store now: NoAccess for anyone
// but a user, Owner for an admin (who may do everything).
func (s *Service) Level(ctx context.Context, a builds.Actor, projectID int64) (Level, error) {
	if a.Admin {
		return Owner, nil
	}
	if a.Kind != builds.ActorUser || a.UserID == 0 {
		return NoAccess, nil
	}
	return s.store.MemberLevel(ctx, projectID, a.UserID, s.builds.Now())
}

// Check decides whether the actor may take action on the project, reading its membership
// now. An instance action (projectID 0) reads none.
func (s *Service) Check(ctx context.Context, a builds.Actor, projectID int64, action Action) (Decision, Level, error) {
	if !ScopeAllows(a, action) {
		return InsufficientScope, NoAccess, nil
	}
	level := NoAccess
	if projectID > 0 {
		var err error
		if level, err = s.Level(ctx, a, projectID); err != nil {
			return 0, NoAccess, err
		}
	}
	return Decide(a, level, action), level, nil
}

// MayRunOn applies the protected-ref rule to ref for an actor at level on the project.
func (s *Service) MayRunOn(ctx context.Context, a builds.Actor, level Level, projectID int64, ref string) (bool, error) {
	if a.Admin {
		return true, nil
	}
	_, tag := gitref.Split(ref)
	refType := projects.RefBranch
	if tag {
		refType = projects.RefTag
	}
	refs, err := s.refs.ProtectedRefs(ctx, projectID, refType)
	if errors.Is(err, builds.ErrNotFound) {
		// An implicit project (a pipeline without a project row): its default branch, main,
		// is protected with GitLab's default, maintainers.
		refs = []projects.ProtectedRef{{RefType: projects.RefBranch, Name: "main", PushAccessLevel: int(Maintainer),
			MergeAccessLevel: int(Maintainer), CreateAccessLevel: int(Maintainer)}}
	} else if err != nil {
		return false, err
	}
	return ProtectedRefAllows(a, level, ref, refs), nil
}

// Members lists a project's members.
func (s *Service) Members(ctx context.Context, projectID int64, query string, page builds.Page) ([]Member, int, error) {
	return s.store.Members(ctx, projectID, query, page)
}

// Member returns one member.
func (s *Service) Member(ctx context.Context, projectID, userID int64) (Member, error) {
	return s.store.Member(ctx, projectID, userID)
}

// MemberProjects lists the projects a user is a member of.
func (s *Service) MemberProjects(ctx context.Context, userID int64, page builds.Page) ([]builds.Project, int, error) {
	return s.store.MemberProjects(ctx, userID, s.builds.Now(), page)
}

func date(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func (s *Service) checkExpiry(t *time.Time) (*time.Time, error) {
	if t == nil {
		return nil, nil
	}
	d := date(*t)
	if !d.After(date(s.builds.Now())) {
		return nil, &builds.ValidationError{Msg: "expires_at must be a date after today"}
	}
	return &d, nil
}

// ownersOnly refuses a change that touches the owner role to a caller below it: GitLab lets
// maintainers manage members below owner, and only owners (and admins) manage owners.
func (s *Service) ownersOnly(ctx context.Context, a builds.Actor, projectID int64, levels ...Level) error {
	touches := false
	for _, l := range levels {
		touches = touches || l == Owner
	}
	if !touches {
		return nil
	}
	d, _, err := s.Check(ctx, a, projectID, ManageOwners)
	if err != nil {
		return err
	}
	if d != Allow {
		return &ForbiddenError{Msg: "only an owner may add, change or remove an owner"}
	}
	return nil
}

func memberDetail(m Member) map[string]any {
	d := map[string]any{"user_id": m.UserID, "username": m.Username, "access_level": int(m.Level)}
	if m.ExpiresAt != nil {
		d["expires_at"] = m.ExpiresAt.Format(time.DateOnly)
	}
	return d
}

func projectTarget(id int64) string { return fmt.Sprintf("project:%d", id) }

// AddMember makes a user a member of a project at a level.
func (s *Service) AddMember(ctx context.Context, a builds.Actor, projectID, userID int64, c MemberChange) (Member, error) {
	if c.Level == nil {
		return Member{}, &builds.ValidationError{Msg: "access_level is missing"}
	}
	if err := CheckMemberLevel(*c.Level); err != nil {
		return Member{}, &builds.ValidationError{Msg: err.Error()}
	}
	if userID <= 0 {
		return Member{}, &builds.ValidationError{Msg: "user_id is missing"}
	}
	m := Member{ProjectID: projectID, UserID: userID, Level: Level(*c.Level), CreatedAt: s.builds.Now()}
	if c.ExpiresAt != nil {
		exp, err := s.checkExpiry(*c.ExpiresAt)
		if err != nil {
			return Member{}, err
		}
		m.ExpiresAt = exp
	}
	if err := s.ownersOnly(ctx, a, projectID, m.Level); err != nil {
		return Member{}, err
	}
	added, err := s.store.AddMember(ctx, m)
	if err != nil {
		return Member{}, err
	}
	s.builds.RecordAudit(ctx, "member_added", projectTarget(projectID), memberDetail(added))
	return added, nil
}

// UpdateMember changes a member's level or expiry. Demoting the last owner is refused.
func (s *Service) UpdateMember(ctx context.Context, a builds.Actor, projectID, userID int64, c MemberChange) (Member, error) {
	var exp *time.Time
	if c.Level != nil {
		if err := CheckMemberLevel(*c.Level); err != nil {
			return Member{}, &builds.ValidationError{Msg: err.Error()}
		}
	}
	if c.ExpiresAt != nil {
		var err error
		if exp, err = s.checkExpiry(*c.ExpiresAt); err != nil {
			return Member{}, err
		}
	}
	if c.Level != nil {
		if err := s.ownersOnly(ctx, a, projectID, Level(*c.Level)); err != nil {
			return Member{}, err
		}
	}
	updated, err := s.store.UpdateMember(ctx, projectID, userID, func(m *Member, owners int) error {
		if err := s.ownersOnly(ctx, a, projectID, m.Level); err != nil {
			return err
		}
		if c.Level != nil {
			if m.Level == Owner && Level(*c.Level) != Owner && owners <= 1 {
				return ErrLastOwner
			}
			m.Level = Level(*c.Level)
		}
		if c.ExpiresAt != nil {
			m.ExpiresAt = exp
		}
		return nil
	})
	if err != nil {
		return Member{}, err
	}
	s.builds.RecordAudit(ctx, "member_updated", projectTarget(projectID), memberDetail(updated))
	return updated, nil
}

// RemoveMember ends a membership; the last owner's is refused.
func (s *Service) RemoveMember(ctx context.Context, a builds.Actor, projectID, userID int64) error {
	var removed Member
	err := s.store.RemoveMember(ctx, projectID, userID, func(m Member, owners int) error {
		if err := s.ownersOnly(ctx, a, projectID, m.Level); err != nil {
			return err
		}
		if m.Level == Owner && owners <= 1 {
			return ErrLastOwner
		}
		removed = m
		return nil
	})
	if err != nil {
		return err
	}
	s.builds.RecordAudit(ctx, "member_removed", projectTarget(projectID), memberDetail(removed))
	return nil
}
