package hooks

import (
	"testing"
	"time"
)

// TestCursorLags: an id seen becomes safe only once settle has passed, so that a
// transaction that took a lower id and commits a moment later is still read; a full batch
// moves at once.
func TestCursorLags(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := Cursor{SafeID: 10, SeenID: 10, SeenAt: t0}
	c = c.next(t0.Add(settle), 50, false)
	if c != (Cursor{SafeID: 10, SeenID: 50, SeenAt: t0.Add(settle)}) {
		t.Fatalf("after the first settle: %+v, want 50 seen, 10 still safe", c)
	}
	if n := c.next(t0.Add(settle+time.Second), 70, false); n != c {
		t.Fatalf("within settle: %+v, want nothing moved (%+v)", n, c)
	}
	c = c.next(t0.Add(2*settle), 80, false)
	if c != (Cursor{SafeID: 50, SeenID: 80, SeenAt: t0.Add(2 * settle)}) {
		t.Fatalf("after the second settle: %+v, want 50 safe, 80 seen", c)
	}
	if n := c.next(t0.Add(2*settle+time.Millisecond), 2050, true); n.SafeID != 2050 {
		t.Fatalf("full batch: %+v, want safe at its last event", n)
	}
}
