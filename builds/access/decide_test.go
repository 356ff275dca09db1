package access

import (
	"testing"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
)

func user(scopes ...string) builds.Actor {
	a := builds.Actor{Kind: builds.ActorUser, UserID: 7, Username: "dev"}
	if len(scopes) > 0 {
		a.Scopes = scopes
	}
	return a
}

func TestDecide(t *testing.T) {
	admin := builds.Actor{Kind: builds.ActorAdminToken, Username: "admin", Admin: true}
	tests := []struct {
		name   string
		actor  builds.Actor
		level  Level
		action Action
		want   Decision
	}{
		{"non-member reads", user(), NoAccess, ReadPipelines, NotFound},
		{"non-member writes", user(), NoAccess, RetryJob, NotFound},
		{"guest reads pipelines", user(), Guest, ReadPipelines, Allow},
		{"guest retries", user(), Guest, RetryJob, Forbidden},
		{"reporter reads environments", user(), Reporter, ReadEnvironments, Allow},
		{"guest reads environments", user(), Guest, ReadEnvironments, Forbidden},
		{"developer retries", user(), Developer, RetryJob, Allow},
		{"developer plays", user(), Developer, PlayJob, Allow},
		{"developer reads variables", user(), Developer, ReadVariables, Allow},
		{"developer reads protected variables", user(), Developer, ReadProtectedVariables, Forbidden},
		{"maintainer writes protected variables", user(), Maintainer, WriteProtectedVariables, Allow},
		{"maintainer deletes a pipeline", user(), Maintainer, DeletePipeline, Forbidden},
		{"owner deletes a pipeline", user(), Owner, DeletePipeline, Allow},
		{"owner manages the instance", user(), Owner, ManageInstance, Forbidden},
		{"any user lists projects", user(), NoAccess, ListProjects, Allow},
		{"admin on a project it is no member of", admin, NoAccess, DeleteProject, Allow},
		{"admin on the instance", admin, NoAccess, ManageInstance, Allow},
		{"read_api token reads", user(ScopeReadAPI), Developer, ReadJobLogs, Allow},
		{"read_api token retries", user(ScopeReadAPI), Developer, RetryJob, InsufficientScope},
		{"read_api token of a non-member", user(ScopeReadAPI), NoAccess, RetryJob, InsufficientScope},
		{"api token retries", user(ScopeAPI), Developer, RetryJob, Allow},
		{"runner-only token reads", user("create_runner"), Owner, ReadPipelines, InsufficientScope},
		{"admin's read_api token writes", builds.Actor{Kind: builds.ActorUser, Admin: true, Scopes: []string{ScopeReadAPI}}, NoAccess, RetryJob, InsufficientScope},
	}
	for _, tt := range tests {
		if got := Decide(tt.actor, tt.level, tt.action); got != tt.want {
			t.Errorf("%s: Decide(%s, %s) = %s, want %s", tt.name, tt.level, tt.action, got, tt.want)
		}
	}
}

// TestTableIsWhole: every action constant has a row, and a row's role is a member level
// unless it is the instance's.
func TestTableIsWhole(t *testing.T) {
	for _, r := range Table {
		if r.AdminOnly || r.Min == NoAccess {
			continue
		}
		if err := CheckMemberLevel(int(r.Min)); err != nil {
			t.Errorf("%s: %v", r.Action, err)
		}
		if r.Covers == "" {
			t.Errorf("%s: Covers is empty: the README's table would not name it", r.Action)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("RuleOf(an action without a row) did not panic")
		}
	}()
	RuleOf("no_such_action")
}

func TestProtectedRefAllows(t *testing.T) {
	refs := []projects.ProtectedRef{
		{RefType: projects.RefBranch, Name: "main", PushAccessLevel: 40, MergeAccessLevel: 40},
		{RefType: projects.RefBranch, Name: "release/*", PushAccessLevel: 0, MergeAccessLevel: 30},
		{RefType: projects.RefBranch, Name: "frozen", PushAccessLevel: 0, MergeAccessLevel: 0},
		{RefType: projects.RefBranch, Name: "ops", PushAccessLevel: 60, MergeAccessLevel: 60},
		{RefType: projects.RefTag, Name: "v*", CreateAccessLevel: 40},
		{RefType: projects.RefTag, Name: "v1-rc*", CreateAccessLevel: 30},
	}
	admin := builds.Actor{Kind: builds.ActorAdminToken, Admin: true}
	tests := []struct {
		actor builds.Actor
		level Level
		ref   string
		want  bool
	}{
		{user(), Developer, "feature", true},
		{user(), Developer, "main", false},
		{user(), Developer, "refs/heads/main", false},
		{user(), Maintainer, "main", true},
		{user(), Owner, "main", true},
		{user(), Developer, "release/1.0", true}, // developers may merge
		{user(), Maintainer, "frozen", false},    // no one
		{admin, NoAccess, "frozen", true},
		{user(), Owner, "ops", false}, // admins only
		{admin, NoAccess, "ops", true},
		{user(), Developer, "refs/tags/v1", false},
		{user(), Maintainer, "refs/tags/v1", true},
		{user(), Developer, "refs/tags/v1-rc2", true}, // any matching pattern that allows
		{user(), Developer, "refs/tags/other", true},
		{user(), Developer, "v1", true}, // a branch named v1: tags' patterns do not apply
	}
	for _, tt := range tests {
		if got := ProtectedRefAllows(tt.actor, tt.level, tt.ref, refs); got != tt.want {
			t.Errorf("ProtectedRefAllows(%s, %s) = %t, want %t", tt.level, tt.ref, got, tt.want)
		}
	}
}
