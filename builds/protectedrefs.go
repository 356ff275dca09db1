package builds

import "github.com/jobapi/jobapi/gitref"

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
	name, tag := gitref.Split(ref)
	if names == nil {
		return !tag && name == implicitProtectedBranch
	}
	patterns := names.Branches
	if tag {
		patterns = names.Tags
	}
	for _, p := range patterns {
		if gitref.Matches(p, name) {
			return true
		}
	}
	return false
}
