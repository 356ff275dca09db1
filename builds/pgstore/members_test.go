package pgstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/testenv"
)

// newAccess is the members' service on a fresh database, with its clock at now.
func newAccess(t *testing.T, now time.Time) (*access.Service, *Store) {
	t.Helper()
	store := New(testenv.Pool(t))
	// A replica's service: this store and Redis, as server.ServiceDeps wires them.
	rs := redisstore.New(testenv.Redis(t))
	svc := builds.NewService(builds.Deps{Store: store, Audit: store, Projects: store, Leases: rs, Queue: rs,
		QueueFeed: rs, Events: rs, Changes: rs, Live: rs, TwoPhase: builds.NeverTwoPhase, Observer: builds.Unobserved,
		Now: func() time.Time { return now }})
	return access.New(access.Deps{Builds: svc, Store: store, Refs: store}), store
}

func newUser(t *testing.T, s *Store, name string) int64 {
	t.Helper()
	var id int64
	err := s.pool.QueryRow(t.Context(), `INSERT INTO users (username, name, email) VALUES ($1, $1, $1 || '@example.com') RETURNING id`,
		name).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newProject(t *testing.T, s *Store, path string) int64 {
	t.Helper()
	p, err := s.CreateProject(t.Context(), builds.Project{Name: path, Path: path, DefaultBranch: "main", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

func level(l access.Level) *int { n := int(l); return &n }

var adminActor = builds.Actor{Kind: builds.ActorAdminToken, Username: "admin", Admin: true}

func userActor(id int64) builds.Actor {
	return builds.Actor{Kind: builds.ActorUser, UserID: id, Username: fmt.Sprint("user", id)}
}

// TestProjectMembers: members are added, listed, read and changed; a second add of a member
// is ErrExists; the level the permission check reads follows every change at once; an
// expired membership is none; a user's projects are those it is a member of.
func TestProjectMembers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	svc, store := newAccess(t, now)
	ctx := t.Context()
	a, b := newProject(t, store, "a"), newProject(t, store, "b")
	alice, bob := newUser(t, store, "alice"), newUser(t, store, "bob")

	if _, err := svc.AddMember(ctx, adminActor, a, alice, access.MemberChange{Level: level(access.Owner)}); err != nil {
		t.Fatal(err)
	}
	m, err := svc.AddMember(ctx, adminActor, a, bob, access.MemberChange{Level: level(access.Developer)})
	if err != nil || m.Username != "bob" || m.Level != access.Developer || m.State != "active" {
		t.Fatalf("add bob: %+v, %v", m, err)
	}
	if _, err := svc.AddMember(ctx, adminActor, a, bob, access.MemberChange{Level: level(access.Guest)}); !errors.Is(err, builds.ErrExists) {
		t.Errorf("second add: %v, want ErrExists", err)
	}
	if _, err := svc.AddMember(ctx, adminActor, a, 999999, access.MemberChange{Level: level(access.Guest)}); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("add of no user: %v, want ErrNotFound", err)
	}
	if _, err := svc.AddMember(ctx, adminActor, 999999, bob, access.MemberChange{Level: level(access.Guest)}); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("add to no project: %v, want ErrNotFound", err)
	}
	var verr *builds.ValidationError
	if _, err := svc.AddMember(ctx, adminActor, b, bob, access.MemberChange{Level: level(35)}); !errors.As(err, &verr) {
		t.Errorf("add at level 35: %v, want a ValidationError", err)
	}

	list, total, err := svc.Members(ctx, a, "", builds.Page{Page: 1, PerPage: 20})
	if err != nil || total != 2 || len(list) != 2 || list[0].UserID != alice || list[1].UserID != bob {
		t.Fatalf("members: %+v (%d), %v", list, total, err)
	}
	if list, total, err = svc.Members(ctx, a, "BO", builds.Page{Page: 1, PerPage: 20}); err != nil || total != 1 || list[0].UserID != bob {
		t.Errorf("members query=BO: %+v (%d), %v; want bob", list, total, err)
	}
	if _, _, err := svc.Members(ctx, 999999, "", builds.Page{Page: 1, PerPage: 20}); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("members of no project: %v, want ErrNotFound", err)
	}

	check := func(who int64, project int64, action access.Action, want access.Decision) {
		t.Helper()
		d, _, err := svc.Check(ctx, userActor(who), project, action)
		if err != nil || d != want {
			t.Errorf("user %d, project %d, %s: %s, %v; want %s", who, project, action, d, err, want)
		}
	}
	check(bob, a, access.RetryJob, access.Allow)
	check(bob, a, access.ReadProtectedVariables, access.Forbidden)
	check(bob, b, access.ReadPipelines, access.NotFound)

	if _, err := svc.UpdateMember(ctx, adminActor, a, bob, access.MemberChange{Level: level(access.Maintainer)}); err != nil {
		t.Fatal(err)
	}
	check(bob, a, access.ReadProtectedVariables, access.Allow)

	// Expiry: the membership ends when its date begins.
	tomorrow := now.Add(24 * time.Hour)
	exp := &tomorrow
	if m, err := svc.UpdateMember(ctx, adminActor, a, bob, access.MemberChange{ExpiresAt: &exp}); err != nil || m.ExpiresAt == nil {
		t.Fatalf("set expiry: %+v, %v", m, err)
	}
	if l, err := store.MemberLevel(ctx, a, bob, now); err != nil || l != access.Maintainer {
		t.Errorf("level before expiry: %s, %v", l, err)
	}
	if l, err := store.MemberLevel(ctx, a, bob, tomorrow.Truncate(24*time.Hour)); err != nil || l != access.NoAccess {
		t.Errorf("level on the expiry date: %s, %v; want no access", l, err)
	}
	yesterday := now.Add(-24 * time.Hour)
	past := &yesterday
	if _, err := svc.UpdateMember(ctx, adminActor, a, bob, access.MemberChange{ExpiresAt: &past}); !errors.As(err, &verr) {
		t.Errorf("expiry in the past: %v, want a ValidationError", err)
	}

	projects, total, err := svc.MemberProjects(ctx, bob, builds.Page{Page: 1, PerPage: 20})
	if err != nil || total != 1 || projects[0].ID != a {
		t.Errorf("bob's projects: %+v (%d), %v; want project a", projects, total, err)
	}

	if err := svc.RemoveMember(ctx, adminActor, a, bob); err != nil {
		t.Fatal(err)
	}
	check(bob, a, access.ReadPipelines, access.NotFound)
	if err := svc.RemoveMember(ctx, adminActor, a, bob); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("second removal: %v, want ErrNotFound", err)
	}
}

// TestLastOwnerStays: neither a demotion nor a removal may leave a project without an owner,
// also when two owners leave at the same time; and only an owner may touch an owner.
func TestLastOwnerStays(t *testing.T) {
	t.Parallel()
	svc, store := newAccess(t, time.Now())
	ctx := t.Context()
	p := newProject(t, store, "p")
	alice, bob, carol := newUser(t, store, "alice"), newUser(t, store, "bob"), newUser(t, store, "carol")
	for _, u := range []int64{alice, bob} {
		if _, err := svc.AddMember(ctx, adminActor, p, u, access.MemberChange{Level: level(access.Owner)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.AddMember(ctx, adminActor, p, carol, access.MemberChange{Level: level(access.Maintainer)}); err != nil {
		t.Fatal(err)
	}

	// A maintainer manages members below owner, not owners.
	var fe *access.ForbiddenError
	if err := svc.RemoveMember(ctx, userActor(carol), p, alice); !errors.As(err, &fe) {
		t.Errorf("a maintainer removes an owner: %v, want ForbiddenError", err)
	}
	if _, err := svc.UpdateMember(ctx, userActor(carol), p, carol, access.MemberChange{Level: level(access.Owner)}); !errors.As(err, &fe) {
		t.Errorf("a maintainer makes itself owner: %v, want ForbiddenError", err)
	}

	// Both owners step down at once: one of them stays owner.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, u := range []int64{alice, bob} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = svc.UpdateMember(ctx, userActor(u), p, u, access.MemberChange{Level: level(access.Developer)})
		}()
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if errors.Is(err, access.ErrLastOwner) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused != 1 {
		t.Fatalf("two owners stepping down at once: %v; want exactly one refused with ErrLastOwner", errs)
	}
	list, _, err := svc.Members(ctx, p, "", builds.Page{Page: 1, PerPage: 20})
	if err != nil {
		t.Fatal(err)
	}
	var owner int64
	for _, m := range list {
		if m.Level == access.Owner {
			owner = m.UserID
		}
	}
	if owner == 0 {
		t.Fatalf("no owner left: %+v", list)
	}
	if err := svc.RemoveMember(ctx, adminActor, p, owner); !errors.Is(err, access.ErrLastOwner) {
		t.Errorf("removing the last owner: %v, want ErrLastOwner", err)
	}
	if err := svc.RemoveMember(ctx, adminActor, p, carol); err != nil {
		t.Errorf("removing a maintainer: %v", err)
	}
}
