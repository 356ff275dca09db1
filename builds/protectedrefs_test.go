package builds

import "testing"

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
