package builds

import (
	"regexp"
	"strings"
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
