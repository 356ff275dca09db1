package recent

import "testing"

func TestRecentRewritingAnEntryDoesNotRotate(t *testing.T) {
	r := New[int](2)
	r.Put(1, 1)
	r.Put(2, 2)
	r.Put(2, 3) // already current: no new generation
	if v, ok := r.Get(1); !ok || v != 1 {
		t.Fatalf("get(1) = %d, %t; want 1, true", v, ok)
	}
	if v, _ := r.Get(2); v != 3 {
		t.Fatalf("get(2) = %d, want the rewritten 3", v)
	}
}
