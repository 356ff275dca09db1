package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/testenv"
)

// The live log's scripts against a real Redis: each outcome of an append, the state moves
// the Service makes, and the trims that keep the tail above the durable size.
func TestLiveTrace(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	now := time.Now()
	const id = 42
	appendAt := func(what string, offset int64, data string, at time.Time, want builds.LiveAppend) {
		t.Helper()
		got, err := s.Append(ctx, id, offset, []byte(data), at)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", what, got, want)
		}
	}
	tail := func(what string, wantBase int64, wantData string) {
		t.Helper()
		base, data, ok, err := s.Tail(ctx, id)
		if err != nil || !ok || base != wantBase || string(data) != wantData {
			t.Errorf("%s: tail %d %q ok=%v err=%v; want %d %q", what, base, data, ok, err, wantBase, wantData)
		}
	}

	appendAt("no state yet", 0, "x", now, builds.LiveAppend{Outcome: builds.LiveMissing})
	if _, _, ok, err := s.Tail(ctx, id); ok || err != nil {
		t.Fatalf("tail of nothing: ok=%v err=%v", ok, err)
	}
	// Postgres holds 10 bytes: the tail starts there.
	if st, err := s.Arm(ctx, id, builds.StatusRunning, 10, now.Add(time.Minute)); err != nil || st != builds.StatusRunning {
		t.Fatalf("arm: %s %v", st, err)
	}
	appendAt("offset behind", 0, "x", now, builds.LiveAppend{Outcome: builds.LiveRange, Status: builds.StatusRunning, Size: 10, Base: 10})
	appendAt("at the end", 10, "hello ", now, builds.LiveAppend{Outcome: builds.LiveAppended, Status: builds.StatusRunning, Size: 16, Base: 10})
	appendAt("again", 16, "world", now, builds.LiveAppend{Outcome: builds.LiveAppended, Status: builds.StatusRunning, Size: 21, Base: 10})
	appendAt("nothing, at the end", 21, "", now, builds.LiveAppend{Outcome: builds.LiveAppended, Status: builds.StatusRunning, Size: 21, Base: 10})
	appendAt("ahead", 30, "x", now, builds.LiveAppend{Outcome: builds.LiveRange, Status: builds.StatusRunning, Size: 21, Base: 10})
	tail("after appends", 10, "hello world")
	appendAt("check due", 21, "x", now.Add(time.Minute), builds.LiveAppend{Outcome: builds.LiveCheckDue, Status: builds.StatusRunning, Size: 21, Base: 10})

	// A flush stored 6 bytes more in Postgres: they leave the tail.
	if err := s.Trim(ctx, id, 16); err != nil {
		t.Fatal(err)
	}
	tail("trimmed", 16, "world")
	if err := s.Trim(ctx, id, 12); err != nil { // an older size: nothing to drop
		t.Fatal(err)
	}
	tail("trimmed to less", 16, "world")

	// The cancel, then a stale check that read running before it: canceling stays.
	if err := s.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Arm(ctx, id, builds.StatusRunning, 16, now.Add(time.Minute)); err != nil || st != builds.StatusCanceling {
		t.Fatalf("arm running over canceling: %s %v; want canceling kept", st, err)
	}
	appendAt("canceling", 21, "!", now, builds.LiveAppend{Outcome: builds.LiveAppended, Status: builds.StatusCanceling, Size: 22, Base: 16})
	// Postgres went past the whole tail (appends made while Redis refused writes): the
	// tail restarts there.
	if _, err := s.Arm(ctx, id, builds.StatusCanceling, 30, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	appendAt("after Postgres moved on", 22, "x", now, builds.LiveAppend{Outcome: builds.LiveRange, Status: builds.StatusCanceling, Size: 30, Base: 30})

	// A finish about to commit: appends go to Postgres; a check that read the build still
	// running (before the commit) does not reopen it, the final status replaces it.
	if err := s.Fence(ctx, id); err != nil {
		t.Fatal(err)
	}
	appendAt("fenced", 30, "x", now, builds.LiveAppend{Outcome: builds.LiveFenced, Status: "closing", Size: 30, Base: 30})
	if st, err := s.Arm(ctx, id, builds.StatusCanceling, 30, now.Add(time.Minute)); err != nil || st != "closing" {
		t.Fatalf("arm canceling over a fresh fence: %s %v; want closing kept", st, err)
	}
	if st, err := s.Arm(ctx, id, builds.StatusCanceled, 30, now.Add(time.Minute)); err != nil || st != builds.StatusCanceled {
		t.Fatalf("arm canceled over a fence: %s %v", st, err)
	}

	// Closed: nothing more, and no check can reopen it.
	if err := s.Close(ctx, id, builds.StatusCanceled); err != nil {
		t.Fatal(err)
	}
	appendAt("closed", 30, "x", now, builds.LiveAppend{Outcome: builds.LiveClosed, Status: builds.StatusCanceled, Size: 30, Base: 30})
	if st, err := s.Arm(ctx, id, builds.StatusRunning, 30, now.Add(time.Minute)); err != nil || st != builds.StatusCanceled {
		t.Fatalf("arm a closed tail: %s %v; want canceled kept", st, err)
	}
	if err := s.Drop(ctx, id, builds.StatusCanceled); err != nil {
		t.Fatal(err)
	}
	appendAt("dropped", 30, "x", now, builds.LiveAppend{Outcome: builds.LiveClosed, Status: builds.StatusCanceled, Size: 0})
	if ttl := rdb.TTL(ctx, prefix+"trace:{42}").Val(); ttl <= 0 || ttl > 24*time.Hour {
		t.Errorf("dropped state TTL %v, want a day at most", ttl)
	}

	// Closing a build whose tail Redis lost leaves a closed state.
	if err := s.Close(ctx, 43, builds.StatusFailed); err != nil {
		t.Fatal(err)
	}
	got, err := s.Append(ctx, 43, 0, []byte("x"), now)
	if err != nil || got.Outcome != builds.LiveClosed || got.Status != builds.StatusFailed {
		t.Errorf("append to a closed, lost tail: %+v %v", got, err)
	}
}

// TestLiveTraceSeal: the archive's one call closes a finished build's tail and reads it;
// when Postgres holds every live byte it drops them too, and a tail Redis lost is created
// closed (a late PATCH still hears the job ended).
func TestLiveTraceSeal(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	now := time.Now()
	arm := func(id, durable int64, data string) {
		t.Helper()
		if _, err := s.Arm(ctx, id, builds.StatusRunning, durable, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Append(ctx, id, durable, []byte(data), now); err != nil || got.Outcome != builds.LiveAppended {
			t.Fatalf("append: %+v %v", got, err)
		}
	}
	wantClosed := func(what string, id int64, status builds.Status) {
		t.Helper()
		got, err := s.Append(ctx, id, 0, []byte("late"), now)
		if err != nil || got.Outcome != builds.LiveClosed || got.Status != status {
			t.Errorf("%s: a late append got %+v, %v; want closed with %s", what, got, err, status)
		}
	}

	// Redis holds bytes past what Postgres holds: they are the archive's, and stay.
	arm(1, 10, "tail bytes")
	base, data, dropped, err := s.Seal(ctx, 1, builds.StatusFailed, 10)
	if err != nil || base != 10 || string(data) != "tail bytes" || dropped {
		t.Fatalf("seal past durable: %d %q dropped=%v %v; want 10 \"tail bytes\" kept", base, data, dropped, err)
	}
	wantClosed("sealed", 1, builds.StatusFailed)
	if base, data, ok, err := s.Tail(ctx, 1); err != nil || !ok || base != 10 || string(data) != "tail bytes" {
		t.Errorf("tail after a seal that kept it: %d %q %v %v", base, data, ok, err)
	}

	// Postgres holds them all (a flush before the finish): dropped at once.
	arm(2, 0, "flushed")
	base, data, dropped, err = s.Seal(ctx, 2, builds.StatusSuccess, 7)
	if err != nil || base != 0 || len(data) != 0 || !dropped {
		t.Fatalf("seal within durable: %d %q dropped=%v %v; want dropped", base, data, dropped, err)
	}
	if _, data, ok, err := s.Tail(ctx, 2); err != nil || !ok || len(data) != 0 {
		t.Errorf("tail after a dropping seal: %q ok=%v %v; want a state without bytes", data, ok, err)
	}
	wantClosed("dropped", 2, builds.StatusSuccess)

	// No tail (Redis lost it): created closed, nothing to keep.
	if _, _, dropped, err := s.Seal(ctx, 3, builds.StatusCanceled, 0); err != nil || !dropped {
		t.Fatalf("seal of a missing tail: dropped=%v %v", dropped, err)
	}
	wantClosed("missing", 3, builds.StatusCanceled)
}

// TestReleaseArm: an ack's Redis work in one script deletes the build's ack key and arms
// its live log as Arm does; a closed tail stays closed (and the key still goes).
func TestReleaseArm(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := redisstore.New(rdb, prefix)
	ctx := context.Background()
	now := time.Now()
	ttls := func(id int64) time.Duration {
		t.Helper()
		got, err := s.TTLs(ctx, []int64{id})
		if err != nil {
			t.Fatal(err)
		}
		return got[id]
	}
	const id = 43
	if err := s.Grant(ctx, id, "7", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttls(id) <= 0 {
		t.Fatal("ack key not granted")
	}
	if st, err := s.ReleaseArm(ctx, id, builds.StatusRunning, 5, now.Add(time.Minute)); err != nil || st != builds.StatusRunning {
		t.Fatalf("release and arm: %s %v", st, err)
	}
	if d := ttls(id); d != 0 {
		t.Errorf("ack key still there (TTL %v) after ReleaseArm", d)
	}
	if base, data, ok, err := s.Tail(ctx, id); err != nil || !ok || base != 5 || len(data) != 0 {
		t.Errorf("tail after ReleaseArm: %d %q ok=%v err=%v; want an empty tail at 5", base, data, ok, err)
	}
	if got, err := s.Append(ctx, id, 5, []byte("hi"), now); err != nil || got.Outcome != builds.LiveAppended || got.Size != 7 {
		t.Errorf("append after ReleaseArm: %+v %v, want appended up to 7", got, err)
	}

	const closed = 44
	if err := s.Grant(ctx, closed, "7", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx, closed, builds.StatusCanceled); err != nil {
		t.Fatal(err)
	}
	if st, err := s.ReleaseArm(ctx, closed, builds.StatusRunning, 0, now.Add(time.Minute)); err != nil || st != builds.StatusCanceled {
		t.Fatalf("release and arm of a closed tail: %s %v, want canceled", st, err)
	}
	if d := ttls(closed); d != 0 {
		t.Errorf("ack key of the closed tail still there (TTL %v)", d)
	}
}
