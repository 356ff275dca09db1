package claimpacing

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Fallback paces the claims of polls that could not read the queue version (Redis
// slow or down). Such a poll cannot tell whether anything changed since its runner last
// found nothing, so before this every one of them claimed in Postgres: with a fleet of
// thousands and a slow Redis, every poll became a claim, which loaded the machine further,
// which made Redis slower. Here:
//
//   - at most Slots fallback claims run at once on this replica, whatever the profiles
//     (sized from the Postgres pool: the rest of the replica's work keeps connections);
//   - per runner profile the polls queue, and one claim at a time (more while claims keep
//     taking builds, as Flights does) runs for the oldest; a claim that found nothing
//     answers every poll that was queued before it started, as that poll's own claim would
//     have answered at that moment: the build that becomes claimable later is found by a
//     later claim, never lost;
//   - after a claim that found nothing (or failed) the profile's next claim waits at least
//     round, so a profile costs Postgres a few claims a second, however many polls wait;
//   - a poll answered that way is held until its hold ends (the long poll's length: a held
//     poll comes back no sooner than with Redis up), and is answered 204 without a queue
//     header, so its runner echoes its old version and claims again next time; while polls
//     are held, the oldest claims again each round, so a build that becomes claimable is
//     found within a round;
//   - a poll that no claim answered within hold+wait is shed: 503 with Retry-After
//     (*OverloadError), which gitlab-runner retries after that delay (network/
//     ratelimit_requester.go, retry_requester.go: 429 and 503 honour Retry-After) and keeps
//     its runner healthy (RequestJob: any code but 403 and a transport error).
//
// The claim's compare-and-set stays the only arbiter of who gets a build: this only
// decides who asks and when, so a build is never handed out twice.
type Fallback struct {
	slots int
	round time.Duration
	hold  time.Duration
	wait  time.Duration

	mu    sync.Mutex
	used  int                        // claims running, all profiles
	by    map[string]*fallbackFlight // profiles with waiters or claims
	queue []*fallbackFlight          // profiles waiting for a free slot, oldest first

	claims   atomic.Int64 // fallback claims run
	answered atomic.Int64 // polls answered 204 by another poll's claim
	shed     atomic.Int64 // polls answered 503
}

type fallbackFlight struct {
	key     string
	limit   int // claims allowed at once
	running int
	started uint64 // claims started so far
	waiting []*fallbackWaiter
	// notBefore: no claim starts before it (after one found nothing or failed).
	notBefore time.Time
	timer     *time.Timer // runs dispatch at notBefore
	queued    bool        // in Fallback.queue
}

type fallbackWaiter struct {
	joined uint64 // flight.started when it joined: a claim started later covers it
	// covered: a claim started after it joined found nothing; from releaseAt (its hold's
	// end) it is answered 204.
	covered   bool
	releaseAt time.Time
	answer    fallbackAnswer
	slot      *FallbackSlot // answer == fallbackClaim
	ch        chan struct{} // Enter: closed once answered
	// Park: fn is called once, when answered, covered past its hold or shed; its timers
	// stand for Enter's.
	fn           func(slot *FallbackSlot, empty bool, err error)
	hold, giveUp *time.Timer
	ended        bool
}

// answeredLocked tells w its answer (w.answer, w.slot): Enter's channel closes, Park's
// callback starts on a goroutine of its own.
func (w *fallbackWaiter) answeredLocked(f *Fallback) {
	if w.fn == nil {
		close(w.ch)
		return
	}
	w.ended = true
	w.hold.Stop()
	w.giveUp.Stop()
	if w.answer == fallbackEmpty {
		f.answered.Add(1)
		go w.fn(nil, true, nil)
		return
	}
	go w.fn(w.slot, false, nil)
}

type fallbackAnswer int

const (
	fallbackPending fallbackAnswer = iota
	fallbackClaim                  // claim now, holding slot
	fallbackEmpty                  // 204: covered, and its hold is over
)

// FallbackConfig sizes Fallback; zero values take the defaults.
type FallbackConfig struct {
	// Slots bounds the fallback claims running at once on a replica (0: 4).
	Slots int
	// Wait is how long past its hold a poll waits for a claim to answer it before it is
	// shed with 503 (0: 5 s).
	Wait time.Duration
}

// fallbackRound is the least time between two claims of one profile after a claim that
// found nothing: a profile costs Postgres at most five empty claims a second, and a new
// build waits for at most this before a claim looks for it.
const fallbackRound = 200 * time.Millisecond

// maxFallbackHold bounds how long a fallback poll is held once answered: even with a long
// poll of minutes, a degraded replica hands its requests back within this.
const maxFallbackHold = 30 * time.Second

// NewFallback paces on the real clock (not the service's, which tests may stop): what it
// paces is load. longPoll is how long a held poll waits (its hold, up to maxFallbackHold).
func NewFallback(cfg FallbackConfig, longPoll time.Duration) *Fallback {
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Second
	}
	return &Fallback{slots: cfg.Slots, round: fallbackRound, hold: min(max(longPoll, 0), maxFallbackHold),
		wait: cfg.Wait, by: map[string]*fallbackFlight{}}
}

// OverloadError is a request shed under overload: 503 with Retry-After.
type OverloadError struct {
	RetryAfter time.Duration
	What       string
}

func (e *OverloadError) Error() string { return "overloaded: " + e.What }

// FallbackSlot is a running fallback claim; Done reports how it ended (once; nil: none).
type FallbackSlot struct {
	f       *Fallback
	fl      *fallbackFlight
	started uint64
	used    bool
}

// Enter waits for profile's turn to claim without the queue version: a slot (claim now),
// empty (204 without a version: a claim that started after it came found nothing), or an
// *OverloadError (no claim answered it in time); ctx's error when the request ended.
func (f *Fallback) Enter(ctx context.Context, profile string) (slot *FallbackSlot, empty bool, err error) {
	f.mu.Lock()
	fl, s := f.joinLocked(profile)
	if s != nil {
		f.mu.Unlock()
		return s, false, nil
	}
	now := time.Now()
	w := &fallbackWaiter{joined: fl.started, releaseAt: now.Add(f.hold), ch: make(chan struct{})}
	fl.waiting = append(fl.waiting, w)
	f.dispatchLocked(fl)
	f.mu.Unlock()

	hold := time.NewTimer(f.hold)
	defer hold.Stop()
	giveUp := time.NewTimer(f.hold + f.wait)
	defer giveUp.Stop()
	for {
		gaveUp := false
		select {
		case <-w.ch:
		case <-hold.C:
		case <-giveUp.C:
			gaveUp = true
		case <-ctx.Done():
		}
		f.mu.Lock()
		switch {
		case w.answer == fallbackClaim:
			f.mu.Unlock()
			return w.slot, false, nil
		case w.answer == fallbackEmpty:
			f.mu.Unlock()
			f.answered.Add(1)
			return nil, true, nil
		case ctx.Err() != nil:
			f.removeLocked(fl, w)
			f.mu.Unlock()
			return nil, false, ctx.Err()
		case w.covered && !time.Now().Before(w.releaseAt):
			f.removeLocked(fl, w)
			f.mu.Unlock()
			f.answered.Add(1)
			return nil, true, nil
		case gaveUp:
			f.removeLocked(fl, w)
			f.mu.Unlock()
			f.shed.Add(1)
			return nil, false, shedError()
		}
		f.mu.Unlock()
	}
}

// Park is Enter without a goroutine: fn is called once, with what Enter would have
// returned, at once on the caller's goroutine when a claim may start now, else on a
// goroutine of its own. A parked poll has no context: its caller checks that its client
// still waits before claiming, and reports FallbackAbandoned on the slot if not.
func (f *Fallback) Park(profile string, fn func(slot *FallbackSlot, empty bool, err error)) {
	f.mu.Lock()
	fl, s := f.joinLocked(profile)
	if s != nil {
		f.mu.Unlock()
		fn(s, false, nil)
		return
	}
	w := &fallbackWaiter{joined: fl.started, releaseAt: time.Now().Add(f.hold), fn: fn}
	w.hold = time.AfterFunc(f.hold, func() { f.parkedTimer(fl, w, false) })
	w.giveUp = time.AfterFunc(f.hold+f.wait, func() { f.parkedTimer(fl, w, true) })
	fl.waiting = append(fl.waiting, w)
	f.dispatchLocked(fl)
	f.mu.Unlock()
}

// Release answers every parked poll 204 without a version at once, as if a claim had
// covered it and its hold were over: a replica that shuts down hands its runners back
// (they ask again, elsewhere). Polls that wait on their goroutines (Enter) keep waiting:
// the HTTP server's shutdown waits for them.
func (f *Fallback) Release() {
	f.mu.Lock()
	var released []*fallbackWaiter
	for _, fl := range f.by {
		kept := fl.waiting[:0]
		for _, w := range fl.waiting {
			if w.fn == nil {
				kept = append(kept, w)
				continue
			}
			w.ended = true
			w.hold.Stop()
			w.giveUp.Stop()
			released = append(released, w)
		}
		clear(fl.waiting[len(kept):])
		fl.waiting = kept
		f.dropIfIdleLocked(fl)
	}
	f.mu.Unlock()
	for _, w := range released {
		f.answered.Add(1)
		go w.fn(nil, true, nil)
	}
}

// parkedTimer is a parked poll's hold ending (204 if a claim covered it) or its wait
// running out (shed), as in Enter's loop.
func (f *Fallback) parkedTimer(fl *fallbackFlight, w *fallbackWaiter, gaveUp bool) {
	f.mu.Lock()
	if w.ended {
		f.mu.Unlock()
		return
	}
	switch {
	case w.covered && !time.Now().Before(w.releaseAt):
		w.ended = true
		w.giveUp.Stop()
		f.removeLocked(fl, w)
		f.mu.Unlock()
		f.answered.Add(1)
		w.fn(nil, true, nil)
	case gaveUp:
		w.ended = true
		f.removeLocked(fl, w)
		f.mu.Unlock()
		f.shed.Add(1)
		w.fn(nil, false, shedError())
	default:
		f.mu.Unlock()
	}
}

// joinLocked returns profile's flight, made if need be, and a slot when nobody waits in it
// and a claim may start now.
func (f *Fallback) joinLocked(profile string) (*fallbackFlight, *FallbackSlot) {
	fl := f.by[profile]
	if fl == nil {
		fl = &fallbackFlight{key: profile, limit: 1}
		f.by[profile] = fl
	}
	if len(fl.waiting) == 0 && f.startable(fl) {
		return fl, f.startLocked(fl)
	}
	return fl, nil
}

// shedError is the answer of a poll no claim answered in time.
func shedError() error {
	return &OverloadError{RetryAfter: retryAfterShed(), What: "no fallback claim answered this job request in time"}
}

// retryAfterShed spreads shed runners' retries over 1 to 5 s, so that they do not return
// together.
func retryAfterShed() time.Duration { return time.Duration(1+rand.IntN(5)) * time.Second }

// startable: fl may start a claim now.
func (f *Fallback) startable(fl *fallbackFlight) bool {
	return f.used < f.slots && fl.running < fl.limit && !time.Now().Before(fl.notBefore)
}

func (f *Fallback) startLocked(fl *fallbackFlight) *FallbackSlot {
	f.used++
	fl.running++
	fl.started++
	f.claims.Add(1)
	return &FallbackSlot{f: f, fl: fl, started: fl.started}
}

// dispatchLocked starts as many of fl's waiters' claims as may run now, oldest first, and
// plans the next look when its round has not come yet or no slot is free.
func (f *Fallback) dispatchLocked(fl *fallbackFlight) {
	for len(fl.waiting) > 0 && f.startable(fl) {
		w := fl.waiting[0]
		fl.waiting = fl.waiting[1:]
		w.slot, w.answer = f.startLocked(fl), fallbackClaim
		w.answeredLocked(f)
	}
	if len(fl.waiting) == 0 || fl.running >= fl.limit {
		return
	}
	if d := time.Until(fl.notBefore); d > 0 {
		if fl.timer == nil {
			fl.timer = time.AfterFunc(d, func() {
				f.mu.Lock()
				fl.timer = nil
				f.dispatchLocked(fl)
				f.dropIfIdleLocked(fl)
				f.mu.Unlock()
			})
		}
		return
	}
	if f.used >= f.slots && !fl.queued {
		fl.queued = true
		f.queue = append(f.queue, fl)
	}
}

// removeLocked takes a waiter that gives up off its flight.
func (f *Fallback) removeLocked(fl *fallbackFlight, w *fallbackWaiter) {
	for i, x := range fl.waiting {
		if x == w {
			fl.waiting = append(fl.waiting[:i], fl.waiting[i+1:]...)
			break
		}
	}
	f.dropIfIdleLocked(fl)
}

func (f *Fallback) dropIfIdleLocked(fl *fallbackFlight) {
	if len(fl.waiting) == 0 && fl.running == 0 && fl.timer == nil && !fl.queued && f.by[fl.key] == fl {
		delete(f.by, fl.key)
	}
}

// FallbackOutcome is how a fallback claim ended.
type FallbackOutcome int

const (
	FallbackFound     FallbackOutcome = iota // it took a build
	FallbackNothing                          // it found none
	FallbackFailed                           // it failed
	FallbackAbandoned                        // its request ended before the claim answered
)

// Done reports the claim's outcome: it answers the polls it covers and starts the next
// claims.
func (s *FallbackSlot) Done(o FallbackOutcome) {
	if s == nil || s.used {
		return
	}
	s.used = true
	f, fl := s.f, s.fl
	f.mu.Lock()
	defer f.mu.Unlock()
	f.used--
	fl.running--
	now := time.Now()
	switch o {
	case FallbackFound:
		fl.limit = min(2*fl.limit, maxFlightClaims)
	case FallbackNothing:
		fl.limit = 1
		fl.notBefore = now.Add(f.round)
		// Every poll queued before this claim started is answered by it; those whose
		// hold is over leave now, the others when it ends.
		kept := fl.waiting[:0]
		for _, w := range fl.waiting {
			if w.joined < s.started {
				w.covered = true
				if !now.Before(w.releaseAt) {
					w.answer = fallbackEmpty
					w.answeredLocked(f)
					continue
				}
			}
			kept = append(kept, w)
		}
		clear(fl.waiting[len(kept):])
		fl.waiting = kept
	case FallbackFailed:
		// Postgres failing: do not hammer it; the waiters wait for a later claim.
		fl.notBefore = now.Add(f.round)
	}
	f.dispatchLocked(fl)
	// A slot freed: the profiles that waited for one.
	for len(f.queue) > 0 && f.used < f.slots {
		next := f.queue[0]
		f.queue = f.queue[1:]
		next.queued = false
		f.dispatchLocked(next)
		f.dropIfIdleLocked(next)
	}
	f.dropIfIdleLocked(fl)
}

// FallbackStats counts this replica's job requests that could not read the queue version.
type FallbackStats struct {
	// Claims: fallback claims run; Answered: polls answered 204 by a claim another poll
	// ran; Shed: polls answered 503 because no claim answered them in time.
	Claims, Answered, Shed int64
}

// Stats returns the counts since f was made.
func (f *Fallback) Stats() FallbackStats {
	return FallbackStats{Claims: f.claims.Load(), Answered: f.answered.Load(), Shed: f.shed.Load()}
}
