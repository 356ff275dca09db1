package access

import (
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/projects"
	"github.com/jobapi/jobapi/gitref"
)

// Protected refs decide who may run what (GitLab's rule, Ci::BuildPolicy and
// Gitlab::UserAccess): on a protected branch, only those allowed to push to it or merge
// into it may create, retry, cancel or play its pipelines and jobs; on a protected tag, only
// those allowed to create it. That is what keeps protected variables and ref_protected
// runners for the people a project trusts with its protected refs.

// The access levels of a protected ref's push, merge and create rights (GitLab's).
const (
	refNoOne  = 0
	refAdmins = 60
)

// refLevelAllows reports whether a member at level passes one right of a protected ref.
func refLevelAllows(right int, level Level) bool {
	switch right {
	case refNoOne, refAdmins:
		return false // no member: no one at all, or admins only (who pass before)
	}
	return int(level) >= right
}

// ProtectedRefAllows reports whether the actor, at level on the project, may run pipelines on
// ref ("main", "refs/heads/main", "refs/tags/v1") given the project's protected refs (both
// types; the ref's own type is picked here). A ref no protected pattern matches is anyone's
// whom the role allows; on a protected one, any matching pattern that lets the member push or
// merge (a branch) or create (a tag) is enough, as GitLab grants it.
func ProtectedRefAllows(a builds.Actor, level Level, ref string, protected []projects.ProtectedRef) bool {
	if a.Admin {
		return true
	}
	name, tag := gitref.Split(ref)
	refType := projects.RefBranch
	if tag {
		refType = projects.RefTag
	}
	matched := false
	for _, p := range protected {
		if p.RefType != refType || !gitref.Matches(p.Name, name) {
			continue
		}
		matched = true
		if tag && refLevelAllows(p.CreateAccessLevel, level) ||
			!tag && (refLevelAllows(p.PushAccessLevel, level) || refLevelAllows(p.MergeAccessLevel, level)) {
			return true
		}
	}
	return !matched
}
