package pgstore

import (
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/hooks"
	"github.com/jobapi/jobapi/testenv"
)

// A hook's failures in a row: the 4th disables it, a failure while it is disabled does not
// count, the next after the backoff doubles it, the 40th disables it for good; a success
// and an edit re-enable it.
func TestRecordHookResult(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := New(testenv.Pool(t))
	pid := pushProject(t, store, "https://example.com/hooks.git")
	now := time.Now().UTC().Truncate(time.Microsecond)
	h, err := store.CreateHook(ctx, hooks.Hook{ProjectID: pid, UUID: "9c1b6e0e-1f7a-4d2b-9a53-0d6c2f1e8a11", URL: "https://example.com/h",
		BranchFilterStrategy: hooks.FilterWildcard, CreatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	backoff := func(n int) time.Duration { // n minutes from the 4th: shows n in the result
		if n < hooks.DisableAfter {
			return 0
		}
		return time.Duration(n) * time.Minute
	}
	fail := func(at time.Time) hooks.Hook {
		t.Helper()
		if err := store.RecordHookResult(ctx, h.ID, false, at, backoff); err != nil {
			t.Fatal(err)
		}
		got, err := store.Hook(ctx, pid, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for range 3 {
		fail(now)
	}
	got := fail(now)
	if got.RecentFailures != 4 || got.DisabledUntil == nil || !got.DisabledUntil.Equal(now.Add(4*time.Minute)) {
		t.Fatalf("after 4 failures: %d, until %v; want 4, until now+4m", got.RecentFailures, got.DisabledUntil)
	}
	if got = fail(now.Add(time.Minute)); got.RecentFailures != 4 {
		t.Errorf("a failure while disabled counted: %d", got.RecentFailures)
	}
	later := now.Add(5 * time.Minute)
	if got = fail(later); got.RecentFailures != 5 || !got.DisabledUntil.Equal(later.Add(5*time.Minute)) {
		t.Errorf("after the backoff: %d until %v, want 5 until %v", got.RecentFailures, got.DisabledUntil, later.Add(5*time.Minute))
	}
	if err := store.RecordHookResult(ctx, h.ID, true, later, backoff); err != nil {
		t.Fatal(err)
	}
	if got, _ = store.Hook(ctx, pid, h.ID); got.RecentFailures != 0 || got.DisabledUntil != nil {
		t.Errorf("after a success: %+v, want re-enabled", got)
	}
	never := func(int) time.Duration { return 0 }
	for range hooks.PermanentlyDisableAfter {
		if err := store.RecordHookResult(ctx, h.ID, false, now, never); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = store.Hook(ctx, pid, h.ID)
	if status, until := got.Alert(now.Add(48 * time.Hour)); status != hooks.AlertDisabled || until != nil {
		t.Errorf("after %d failures: %s until %v, want disabled", got.RecentFailures, status, until)
	}
	if got = fail(now); got.RecentFailures != hooks.PermanentlyDisableAfter {
		t.Errorf("a failure of a disabled hook counted: %d", got.RecentFailures)
	}
	if got, err = store.UpdateHook(ctx, got); err != nil || got.RecentFailures != 0 || got.DisabledUntil != nil {
		t.Errorf("after an edit: %+v, %v; want re-enabled", got, err)
	}
}
