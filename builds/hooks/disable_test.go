package hooks

import (
	"testing"
	"time"
)

func TestDisableBackoffDoublesToADay(t *testing.T) {
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{3, 0}, {4, time.Minute}, {5, 2 * time.Minute}, {8, 16 * time.Minute}, {14, 1024 * time.Minute}, {15, 24 * time.Hour}, {39, 24 * time.Hour}} {
		if got := disableBackoff(time.Minute, c.failures); got != c.want {
			t.Errorf("after %d failures: disabled for %v, want %v", c.failures, got, c.want)
		}
	}
}

func TestAlert(t *testing.T) {
	now := time.Now()
	later, earlier := now.Add(time.Minute), now.Add(-time.Second)
	for _, c := range []struct {
		h         Hook
		want      string
		wantUntil bool
	}{
		{Hook{}, AlertExecutable, false},
		{Hook{RecentFailures: 4, DisabledUntil: &later}, AlertTemporarilyDisabled, true},
		{Hook{RecentFailures: 5, DisabledUntil: &earlier}, AlertExecutable, false}, // backoff over: tried again
		{Hook{RecentFailures: PermanentlyDisableAfter}, AlertDisabled, false},
	} {
		got, until := c.h.Alert(now)
		if got != c.want || (until != nil) != c.wantUntil {
			t.Errorf("%+v: %s until %v, want %s (until set: %v)", c.h, got, until, c.want, c.wantUntil)
		}
	}
}
