package access

import (
	"slices"
	"testing"

	"github.com/jobapi/jobapi/builds/users"
)

// TestRunnerScopes: the runner rows take GitLab's runner scopes instead of api (create_runner
// for creating, manage_runner for the rest, read_api still reading), every other row only api
// and read_api; the scopes the table names are ones the users package issues.
func TestRunnerScopes(t *testing.T) {
	cases := []struct {
		action Action
		scope  string
		want   bool
	}{
		{CreateRunner, ScopeCreateRunner, true},
		{CreateRunner, ScopeManageRunner, false},
		{CreateRunner, ScopeReadAPI, false},
		{ReadRunners, ScopeManageRunner, true},
		{ReadRunners, ScopeReadAPI, true},
		{ReadRunners, ScopeCreateRunner, false},
		{ManageRunners, ScopeManageRunner, true},
		{ManageRunners, ScopeReadAPI, false},
		{ManageInstance, ScopeManageRunner, false},
		{ReadInstance, ScopeManageRunner, false},
		{ReadInstance, ScopeReadAPI, true},
		{RunPipeline, ScopeCreateRunner, false},
	}
	for _, c := range cases {
		a := user(c.scope)
		a.Admin = true
		if got := ScopeAllows(a, c.action); got != c.want {
			t.Errorf("%s with a %s token: %v, want %v", c.action, c.scope, got, c.want)
		}
		if d := Decide(a, Owner, c.action); (d == Allow) != c.want {
			t.Errorf("Decide(%s, %s token): %s", c.action, c.scope, d)
		}
	}
	if got := RuleOf(ManageRunners).TokenScopes(); !slices.Equal(got, []string{ScopeAPI, ScopeManageRunner}) {
		t.Errorf("ManageRunners' scopes %v, want api manage_runner (the insufficient_scope answer names them)", got)
	}
	for _, r := range Table {
		for _, s := range r.TokenScopes() {
			if !slices.Contains(users.Scopes, s) {
				t.Errorf("%s names scope %q, which no token can have", r.Action, s)
			}
		}
	}
}
