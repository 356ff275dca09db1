package builds

import "testing"

// TestRefMatches: GitLab's ProtectedRefMatcher, a name or a pattern whose * stands for any
// characters, / included, matched against the whole name.
func TestRefMatches(t *testing.T) {
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
		if got := RefMatches(c.pattern, c.name); got != c.want {
			t.Errorf("RefMatches(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

// TestRefProtected: a tag ref is protected by the tag list, a branch by the branch list; a
// project id without a row protects its main branch only.
func TestRefProtected(t *testing.T) {
	t.Parallel()
	names := &ProtectedRefNames{Branches: []string{"main", "release/*"}, Tags: []string{"v*"}}
	for ref, want := range map[string]bool{"main": true, "refs/heads/main": true, "refs/tags/main": false,
		"release/2": true, "refs/tags/v1.0": true, "v1.0": false, "feature": false} {
		if got := RefProtected(ref, names); got != want {
			t.Errorf("RefProtected(%q) = %v, want %v", ref, got, want)
		}
	}
	for ref, want := range map[string]bool{"main": true, "refs/heads/main": true, "refs/tags/main": false, "trunk": false} {
		if got := RefProtected(ref, nil); got != want {
			t.Errorf("implicit project: RefProtected(%q) = %v, want %v", ref, got, want)
		}
	}
}
