package access

import "github.com/jobapi/jobapi/builds"

// Decision is the answer to "may this caller do this here".
type Decision int

const (
	// Allow: go ahead.
	Allow Decision = iota
	// NotFound: the caller has no access to the project; it is answered as if the project
	// did not exist (GitLab's 404), so that a project's existence does not leak.
	NotFound
	// Forbidden: a member whose role is below the action's (403), or a non-admin asking for
	// an instance action.
	Forbidden
	// InsufficientScope: the token's scopes do not cover the action (GitLab's 403
	// insufficient_scope), whatever the role.
	InsufficientScope
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case NotFound:
		return "not_found"
	case Forbidden:
		return "forbidden"
	case InsufficientScope:
		return "insufficient_scope"
	}
	return "unknown"
}

// GitLab's token scopes that the table reads (the users package issues them).
const (
	ScopeAPI          = "api"
	ScopeReadAPI      = "read_api"
	ScopeCreateRunner = "create_runner"
	ScopeManageRunner = "manage_runner"
)

// TokenScopes lists the scopes of which a personal access token needs one for r: api, read_api
// for a read, and the row's own Scopes. It is what an insufficient_scope answer names.
func (r Rule) TokenScopes() []string {
	s := []string{ScopeAPI}
	if !r.Write {
		s = append(s, ScopeReadAPI)
	}
	return append(s, r.Scopes...)
}

// ScopeAllows reports whether the actor's scopes cover the action (one of its row's
// TokenScopes); an actor without scopes (the admin token, a web session) is not limited.
func ScopeAllows(a builds.Actor, action Action) bool {
	for _, s := range RuleOf(action).TokenScopes() {
		if a.HasScope(s) {
			return true
		}
	}
	return false
}

// Decide is the whole rule for one action: the scope first (a token that may not do this
// kind of thing at all is refused whatever its user's role), then admins pass, then instance
// actions are refused, then a non-member gets NotFound and a member below the action's role
// Forbidden. level is the actor's level on the project (NoAccess for no membership).
func Decide(a builds.Actor, level Level, action Action) Decision {
	r := RuleOf(action)
	switch {
	case !ScopeAllows(a, action):
		return InsufficientScope
	case a.Admin:
		return Allow
	case r.AdminOnly:
		return Forbidden
	case r.Min == NoAccess:
		return Allow
	case level < Guest:
		return NotFound
	case level < r.Min:
		return Forbidden
	}
	return Allow
}
