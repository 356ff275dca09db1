package gitref

import "testing"

// TestMatches: GitLab's ProtectedRefMatcher, a name or a pattern whose * stands for any
// characters, / included, matched against the whole name.
func TestMatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"main", "main", true}, {"main", "main2", false}, {"main", "xmain", false},
		{"release/*", "release/1.0", true}, {"release/*", "release/a/b", true}, {"release/*", "release", false},
		{"release/*", "prerelease/1", false}, {"*-stable", "13-stable", true}, {"*-stable", "13-stable-x", false},
		{"*gitlab*", "my-gitlab-branch", true}, {"7.*.x", "7.3.x", true}, {"7.*.x", "7.3.x-patch", false},
		{"7.*.x", "7a3.x", false}, // . is literal
		{"*", "anything/at/all", true}, {"v[1]", "v1", false}, {"a+b", "a+b", true}, {"a+b", "aab", false},
	} {
		if got := Matches(c.pattern, c.name); got != c.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}
