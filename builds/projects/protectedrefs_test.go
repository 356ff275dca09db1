package projects

import "testing"

// TestNewProtectedRef: GitLab's defaults (maintainers), its access levels only, a name.
func TestNewProtectedRef(t *testing.T) {
	t.Parallel()
	name, dev, bad := "release/*", 30, 35
	p, err := newProtectedRef(RefBranch, ProtectedRefChange{Name: &name, PushAccessLevel: &dev})
	if err != nil || p.PushAccessLevel != 30 || p.MergeAccessLevel != 40 || p.CreateAccessLevel != 40 || p.Name != name {
		t.Errorf("newProtectedRef = %+v, %v", p, err)
	}
	for _, c := range []ProtectedRefChange{{}, {Name: new(string)}, {Name: &name, MergeAccessLevel: &bad}} {
		if _, err := newProtectedRef(RefBranch, c); err == nil {
			t.Errorf("newProtectedRef(%+v) accepted", c)
		}
	}
	for _, n := range []string{"a b", "-x", "a..b", "x:y", "a/"} {
		if _, err := newProtectedRef(RefTag, ProtectedRefChange{Name: &n}); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}
