package hooks

import (
	"regexp"
	"strings"
)

// compileFilter reads a regex branch filter (GitLab's branch_filter_strategy regex, RE2 here).
func compileFilter(expr string) (*regexp.Regexp, error) { return regexp.Compile(expr) }

// branchMatches reports whether a push to branch reaches a hook, as GitLab's
// push_events_branch_filter decides: all_branches or an empty filter take every branch;
// wildcard takes the names the glob matches, its * matching any run of characters, slashes
// included (release/* takes release/1.0 and release/1/rc); regex those the expression finds.
func branchMatches(h Hook, branch string) bool {
	if h.BranchFilterStrategy == FilterAllBranches || h.PushEventsBranchFilter == "" {
		return true
	}
	if h.BranchFilterStrategy == FilterRegex {
		re, err := compileFilter(h.PushEventsBranchFilter)
		return err == nil && re.MatchString(branch)
	}
	parts := strings.Split(h.PushEventsBranchFilter, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	re, err := regexp.Compile("^" + strings.Join(parts, ".*") + "$")
	return err == nil && re.MatchString(branch)
}
