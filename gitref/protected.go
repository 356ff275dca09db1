package gitref

import (
	"regexp"
	"strings"
)

// Split is a pipeline ref's name and whether it is a tag.
func Split(ref string) (name string, tag bool) {
	if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return t, true
	}
	return strings.TrimPrefix(ref, "refs/heads/"), false
}

// Matches is GitLab's ProtectedRefMatcher: the name itself, or a pattern in which each *
// stands for any characters, / included (release/* matches release/1.0 and release/a/b).
func Matches(pattern, name string) bool {
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
