package claimpacing

import (
	"context"
	"errors"
	"testing"
	"time"
)

type fallbackResult struct {
	slot  *FallbackSlot
	empty bool
	err   error
}

// parkPolls: enterAsync parks its polls (Fallback.Park) instead of entering on a goroutine.
var parkPolls bool

// enterAsync enters profile's flight in the background.
func enterAsync(f *Fallback, ctx context.Context, profile string) <-chan fallbackResult {
	ch := make(chan fallbackResult, 1)
	if parkPolls {
		f.Park(profile, func(s *FallbackSlot, empty bool, err error) { ch <- fallbackResult{s, empty, err} })
		return ch
	}
	go func() {
		s, empty, err := f.Enter(ctx, profile)
		ch <- fallbackResult{s, empty, err}
	}()
	return ch
}

// enterInOrder queues n polls of profile one after the other (behind what is queued).
func enterInOrder(t *testing.T, f *Fallback, ctx context.Context, profile string, n int) []<-chan fallbackResult {
	t.Helper()
	f.mu.Lock()
	queued := 0
	if fl := f.by[profile]; fl != nil {
		queued = len(fl.waiting)
	}
	f.mu.Unlock()
	var chs []<-chan fallbackResult
	for i := range n {
		chs = append(chs, enterAsync(f, ctx, profile))
		waitQueued(t, f, profile, queued+i+1)
	}
	return chs
}

func waitQueued(t *testing.T, f *Fallback, profile string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		queued := 0
		if fl := f.by[profile]; fl != nil {
			queued = len(fl.waiting)
		}
		f.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d polls queued in %q", queued, n, profile)
		}
		time.Sleep(time.Millisecond)
	}
}

func receive(t *testing.T, ch <-chan fallbackResult) fallbackResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("a poll was never answered")
		return fallbackResult{}
	}
}

// A claim answers the polls queued before it started, not those that came while it ran:
// their own claim would have looked later.
func TestFallbackClaimAnswersThePollsQueuedBeforeIt(t *testing.T) {
	f := NewFallback(FallbackConfig{Slots: 4}, 0)
	f.round = 10 * time.Millisecond
	ctx := context.Background()
	first, _, err := f.Enter(ctx, "p")
	if err != nil || first == nil {
		t.Fatalf("first poll: %v, %v; want a slot", first, err)
	}
	const n = 5
	waiting := enterInOrder(t, f, ctx, "p", n)
	first.Done(FallbackNothing)
	// The first claim started before they came: the oldest claims next, after the round,
	// and the others wait for it.
	r := receive(t, waiting[0])
	if r.err != nil || r.slot == nil {
		t.Fatalf("oldest poll answered %v, %v; want it to claim", r.slot, r.err)
	}
	waitQueued(t, f, "p", n-1)
	r.slot.Done(FallbackNothing)
	for i, ch := range waiting[1:] {
		r := receive(t, ch)
		if !r.empty || r.err != nil {
			t.Errorf("poll %d: %v, %v; want 204 without a queue version", i+1, r.slot, r.err)
		}
	}
	if got := f.claims.Load(); got != 2 {
		t.Errorf("%d claims for %d polls, want 2", got, n+1)
	}
	if got := f.answered.Load(); got != n-1 {
		t.Errorf("%d polls answered by another's claim, want %d", got, n-1)
	}
}

// Claims that take builds let the next ones start at once, more at a time.
func TestFallbackClaimFoundStartsTheNext(t *testing.T) {
	f := NewFallback(FallbackConfig{Slots: 8}, 0)
	f.round = time.Hour // a claim that found something must not wait for the round
	ctx := context.Background()
	first, _, _ := f.Enter(ctx, "p")
	chs := enterInOrder(t, f, ctx, "p", 3)
	a, b, c := chs[0], chs[1], chs[2]
	first.Done(FallbackFound)
	ra, rb := receive(t, a), receive(t, b)
	if ra.slot == nil || rb.slot == nil {
		t.Fatalf("after a found build the next two claim at once: %v %v", ra, rb)
	}
	ra.slot.Done(FallbackFound)
	rb.slot.Done(FallbackFound)
	if rc := receive(t, c); rc.slot == nil {
		t.Fatalf("third: %v", rc)
	} else {
		rc.slot.Done(FallbackFound)
	}
}

// At most Slots fallback claims run at once, whatever the profiles; a poll that no claim
// answers in time is shed with 503 and a Retry-After.
func TestFallbackClaimsBoundedAndShed(t *testing.T) {
	f := NewFallback(FallbackConfig{Slots: 2, Wait: 100 * time.Millisecond}, 0)
	ctx := context.Background()
	s1, _, _ := f.Enter(ctx, "a")
	s2, _, _ := f.Enter(ctx, "b")
	if s1 == nil || s2 == nil {
		t.Fatal("two slots, two profiles: both claim")
	}
	start := time.Now()
	r := receive(t, enterAsync(f, ctx, "c"))
	var shed *OverloadError
	if !errors.As(r.err, &shed) || shed.RetryAfter < time.Second || shed.RetryAfter > 5*time.Second {
		t.Fatalf("third profile with both slots busy: %v, %v; want an OverloadError with a Retry-After of 1 to 5 s", r.slot, r.err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("shed after %v; want it to wait its turn first (100 ms)", waited)
	}
	if f.shed.Load() != 1 {
		t.Errorf("shed count %d, want 1", f.shed.Load())
	}
	// A slot that frees goes to a profile that waits for one.
	ch := enterAsync(f, ctx, "c")
	waitQueued(t, f, "c", 1)
	s1.Done(FallbackNothing)
	if r := receive(t, ch); r.slot == nil {
		t.Fatalf("a freed slot: %v, %v; want the waiting profile to claim", r.slot, r.err)
	} else {
		r.slot.Done(FallbackNothing)
	}
	s2.Done(FallbackFailed)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used != 0 {
		t.Errorf("%d slots still used", f.used)
	}
}

// With a long poll, a poll a claim answered is held until its hold ends, so that a runner
// comes back no sooner than with Redis up.
func TestFallbackClaimHoldsAnsweredPolls(t *testing.T) {
	f := NewFallback(FallbackConfig{Slots: 2}, 300*time.Millisecond)
	ctx := context.Background()
	first, _, _ := f.Enter(ctx, "p")
	start := time.Now()
	chs := enterInOrder(t, f, ctx, "p", 2)
	a, b := chs[0], chs[1]
	f.round = 10 * time.Millisecond
	first.Done(FallbackNothing)
	ra := receive(t, a)
	f.mu.Lock()
	f.round = time.Hour // no claim after the next: b is answered by it alone
	f.mu.Unlock()
	if ra.slot == nil {
		t.Fatalf("oldest: %v", ra)
	}
	ra.slot.Done(FallbackNothing)
	rb := receive(t, b)
	if !rb.empty || rb.err != nil {
		t.Fatalf("held poll: %v, %v; want 204", rb.slot, rb.err)
	}
	if held := time.Since(start); held < 250*time.Millisecond {
		t.Errorf("answered after %v; want it held for its long poll (300 ms)", held)
	}
}

// A poll whose request ends leaves its flight; its slot, abandoned, passes on.
func TestFallbackClaimCanceled(t *testing.T) {
	f := NewFallback(FallbackConfig{Slots: 1}, 0)
	first, _, _ := f.Enter(context.Background(), "p")
	ctx, cancel := context.WithCancel(context.Background())
	ch := enterAsync(f, ctx, "p")
	waitQueued(t, f, "p", 1)
	cancel()
	if r := receive(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled poll: %v, %v", r.slot, r.err)
	}
	first.Done(FallbackAbandoned)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.by) != 0 || f.used != 0 {
		t.Errorf("left behind: %d flights, %d slots used", len(f.by), f.used)
	}
}

// The same pacing for polls parked without a goroutine (Fallback.Park), whose hold and
// wait are timers: answered, covered, held and shed alike. (A parked poll has no context
// to cancel.)
func TestFallbackParked(t *testing.T) {
	parkPolls = true
	defer func() { parkPolls = false }()
	t.Run("AnswersThePollsQueuedBeforeIt", TestFallbackClaimAnswersThePollsQueuedBeforeIt)
	t.Run("FoundStartsTheNext", TestFallbackClaimFoundStartsTheNext)
	t.Run("BoundedAndShed", TestFallbackClaimsBoundedAndShed)
	t.Run("HoldsAnsweredPolls", TestFallbackClaimHoldsAnsweredPolls)
}

// Release answers every parked poll 204 at once; a poll on its goroutine keeps waiting.
func TestFallbackReleaseAnswersParkedPolls(t *testing.T) {
	f := NewFallback(FallbackConfig{Slots: 1}, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, _, _ := f.Enter(ctx, "p")
	onGoroutine := enterAsync(f, ctx, "p")
	waitQueued(t, f, "p", 1)
	parkPolls = true
	parked := enterInOrder(t, f, ctx, "p", 2)
	parkPolls = false
	f.Release()
	for i, ch := range parked {
		if r := receive(t, ch); !r.empty || r.err != nil {
			t.Errorf("parked poll %d at Release: %v, %v; want 204", i, r.slot, r.err)
		}
	}
	waitQueued(t, f, "p", 1)
	first.Done(FallbackFound)
	if r := receive(t, onGoroutine); r.slot == nil {
		t.Fatalf("the poll on its goroutine after Release: %v; want its claim", r)
	}
}
