package claimpacing

import (
	"context"
	"sync"
	"time"
)

// Flights lets one claim per runner profile (its key: what a claim matches on) and queue
// version run at a time on this replica. After a bump every polling runner echoes the old version and goes
// to the claim; the empty-profile record answers them once one claim of the profile has
// found nothing, but until then (one claim's duration, seconds under load) every poll of a
// fleet of thousands runs its own claim, and all but a few find nothing. Here a poll whose
// profile is being claimed at its version waits for that claim instead:
//
//   - it found nothing: the waiters are answered 204, as the empty-profile record would
//     answer them a moment later (the same reason makes it safe: the version was read before
//     the claim, and a build that became claimable after the claim's snapshot bumps it, so
//     the 204 carries a version that is already old and the runner's next poll claims);
//   - it took a build: there may be more, so the oldest waiter claims next, and as long as
//     claims keep taking builds the profile may run twice as many at once (up to
//     maxFlightClaims: a burst of builds for one profile is not taken one by one), until a
//     claim finds nothing (back to one);
//   - it failed (Postgres down, a timeout): the waiters claim on their own, as without this;
//     a failure never answers anyone but its own request, so it cannot hide a build;
//   - its request gave up (the runner went away): the oldest waiter claims instead.
//
// The claim's compare-and-set (SKIP LOCKED) stays the only arbiter of who gets a build;
// this only decides who asks. A waiter waits at most maxFlightWait, then claims on its own.
type Flights struct {
	mu sync.Mutex
	by map[string]*claimFlight // profile → its flight at the newest version seen
}

type claimFlight struct {
	version string
	limit   int // claims allowed at once
	running int
	waiting []*flightWaiter // oldest first
	empty   bool            // a claim at version found nothing
}

type flightWaiter struct {
	ch     chan struct{} // closed when answered
	answer flightAnswer
}

type flightAnswer int

const (
	flightEmpty flightAnswer = iota + 1 // 204
	flightClaim                         // claim, holding a slot
	flightAlone                         // claim without a slot
)

// FlightOutcome is how a claim that held a slot ended.
type FlightOutcome int

const (
	FlightNothing   FlightOutcome = iota // the claim found no build
	FlightFound                          // it took one
	FlightFailed                         // it failed
	FlightAbandoned                      // it did not run to an answer (its request ended, the runner changed)
)

// maxFlightClaims bounds the claims one profile runs at once on a replica while they keep
// taking builds.
const maxFlightClaims = 64

// maxFlightWait bounds a waiter's wait for the claims ahead of it.
const maxFlightWait = 10 * time.Second

// maxFlightProfiles bounds the map; past it the map starts over.
const maxFlightProfiles = 10_000

// NewFlights returns flights with no profile in flight.
func NewFlights() *Flights { return &Flights{by: map[string]*claimFlight{}} }

// FlightSlot is a claim's place in its profile's flight; Done reports how it ended (once;
// a nil slot is a claim that holds none).
type FlightSlot struct {
	f    *Flights
	fl   *claimFlight
	used bool
}

// Enter waits, if need be, for its turn to claim for profile at version: empty means a
// claim at this version found nothing (answer 204); otherwise the caller claims, and
// reports the outcome through the slot (nil when it claims on its own).
func (f *Flights) Enter(ctx context.Context, profile, version string) (slot *FlightSlot, empty bool, err error) {
	f.mu.Lock()
	fl := f.by[profile]
	if fl == nil || fl.version != version {
		// A new version (or the first): its flight starts with what the last one learned.
		limit := 1
		if fl != nil {
			limit = fl.limit
		}
		if len(f.by) >= maxFlightProfiles {
			clear(f.by)
		}
		fl = &claimFlight{version: version, limit: limit}
		f.by[profile] = fl
	}
	if fl.empty {
		f.mu.Unlock()
		return nil, true, nil
	}
	if fl.running < fl.limit {
		fl.running++
		f.mu.Unlock()
		return &FlightSlot{f: f, fl: fl}, false, nil
	}
	w := &flightWaiter{ch: make(chan struct{})}
	fl.waiting = append(fl.waiting, w)
	f.mu.Unlock()

	timer := time.NewTimer(maxFlightWait)
	defer timer.Stop()
	select {
	case <-w.ch:
	case <-timer.C:
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch w.answer {
	case flightEmpty:
		return nil, true, nil
	case flightClaim:
		return &FlightSlot{f: f, fl: fl}, false, nil
	case flightAlone:
		return nil, false, nil
	}
	// Not answered: off the list.
	for i, x := range fl.waiting {
		if x == w {
			fl.waiting = append(fl.waiting[:i], fl.waiting[i+1:]...)
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return nil, false, nil // waited long enough: claim on its own
}

// Done reports how the slot's claim ended and hands its turn on.
func (s *FlightSlot) Done(o FlightOutcome) {
	if s == nil || s.used {
		return
	}
	s.used = true
	f, fl := s.f, s.fl
	f.mu.Lock()
	defer f.mu.Unlock()
	fl.running--
	answer := func(n int, a flightAnswer) {
		for _, w := range fl.waiting[:n] {
			w.answer = a
			close(w.ch)
		}
		fl.waiting = fl.waiting[n:]
	}
	switch o {
	case FlightNothing:
		fl.empty = true
		fl.limit = 1
		answer(len(fl.waiting), flightEmpty)
	case FlightFailed:
		answer(len(fl.waiting), flightAlone)
	case FlightFound, FlightAbandoned:
		if o == FlightFound {
			fl.limit = min(2*fl.limit, maxFlightClaims)
		}
		n := min(len(fl.waiting), max(fl.limit-fl.running, 0))
		fl.running += n
		answer(n, flightClaim)
	}
}
