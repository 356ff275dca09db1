// Package longpoll holds requests until something they wait for may have changed: the job
// requests of idle runners (Hub) and the waits for a pipeline (Watchers). It knows nothing
// of builds: runners come as a profile key with what a count needs, the queue as its
// version, and what can be claimed as a count.
//
// The long poll (JOBAPI_LONG_POLL) holds idle job requests until the queue changes. Waking
// every held request on every change sends the whole fleet to Postgres for each new build,
// one of them wins and the rest come back (a thundering herd). Instead each replica hears
// every bump on one subscription (Feed: SET and PUBLISH in one MULTI), counts once per
// runner profile (tags, run_untagged, access_level: what the claim matches on) how many
// pending builds a claim of that profile could take (Counter, the claim's own
// conditions), and wakes that many of the profile's held requests, oldest first. A bump that
// names a runner (its settings or token changed) drops this replica's cached copy and wakes
// that runner.
//
// Missed wake-ups are the danger, so there is a net under it: while requests are held the
// version is still read every watchPeriod, and a version no announcement told of, or any
// change while the subscription is down, wakes everyone; a woken request that ends without
// a build (someone else took it, its runner went away) has its profile counted again after
// a backoff of 100 ms doubling to 5 s. Without a feed or a counter every change wakes
// everyone, as before.
//
// A request is held either on its goroutine (Wait) or without one (Park: its handler gave
// the connection up and returned, and a callback answers it once woken): at 10,000 held
// runners the goroutines, their stacks and net/http's buffers were most of a replica's
// memory. Release ends every held request, for a replica that shuts down.
package longpoll

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Versions reads the queue's version (builds.Queue).
type Versions interface {
	Version(ctx context.Context) (string, error)
}

// Feed hears the queue's bumps (builds.QueueFeed, Redis pub/sub).
type Feed interface {
	// SubscribeQueue calls ready once the subscription is live, then fn for every bump
	// (runnerID, when not 0, names the runner whose settings or token changed) until ctx
	// ends (nil) or the connection fails (an error).
	SubscribeQueue(ctx context.Context, ready func(), fn func(version string, runnerID int64)) error
}

// Counter counts what a claim could take (builds.ClaimCounter, pgstore): how many pending
// builds a runner with these tags, run_untagged setting and access level (protectedOnly:
// ref_protected) could claim, up to limit.
type Counter interface {
	CountClaimable(ctx context.Context, tags []string, runUntagged, protectedOnly bool, limit int) (int, error)
}

// watchPeriod is how often the hub reads the version while requests are held.
const watchPeriod = 200 * time.Millisecond

// recountMin and recountMax bound the backoff of a profile's recount after woken requests
// that took nothing.
const (
	recountMin = 100 * time.Millisecond
	recountMax = 5 * time.Second
)

// knownVersions is how many recent versions the hub remembers, to tell a request that
// echoes an older one (it missed a change: claim at once) from one that echoes a version
// the hub has not heard of yet (wait for its announcement).
const knownVersions = 64

type waiter struct {
	runnerID      int64
	profile       string
	tags          []string
	runUntagged   bool
	protectedOnly bool
	ch            chan struct{} // Wait: closed when woken or released
	// Park: fn is called once, when woken (true) or at its timer or Release (false).
	fn    func(woken bool, held HeldRequest)
	timer *time.Timer
	woken bool
	ended bool // Park: fn called or about to be
}

// wakeLocked marks w woken; a parked request's callback starts on a goroutine of its own.
func (w *waiter) wakeLocked(h *Hub) {
	w.woken = true
	if w.fn == nil {
		close(w.ch)
		return
	}
	w.ended = true
	w.timer.Stop()
	h.callLocked(func() { w.fn(true, HeldRequest{hub: h, w: w}) })
}

type profileWaiters struct {
	tags          []string
	runUntagged   bool
	protectedOnly bool
	list          []*waiter // oldest first
	// backoff is the next recount's delay; recountAt a recount already planned.
	backoff   time.Duration
	recountAt time.Time
}

// Hub holds idle job requests and wakes them as the package comment says.
type Hub struct {
	queue   Versions
	counter Counter // nil: wake everyone
	forget  func(runnerID int64)
	log     *slog.Logger

	mu       sync.Mutex
	waiters  map[string]*profileWaiters
	count    int
	versions []string // known versions, newest last
	feedUp   bool
	watching bool
	dirty    map[string]bool // profiles to count
	kick     chan struct{}
	released bool // Release was called: nothing is held any more
	// Parked requests' callbacks: how many run, and those waiting for a turn (callLocked).
	calling int
	calls   []func()
}

// NewHub returns a hub that reads the version from q and counts with counter (nil: every
// change wakes everyone); forget, when not nil, is told of a runner a bump names.
func NewHub(q Versions, counter Counter, forget func(runnerID int64), log *slog.Logger) *Hub {
	return &Hub{queue: q, counter: counter, forget: forget, log: log,
		waiters: map[string]*profileWaiters{}, dirty: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Profile is what a claim matches a runner on: Key names it (runners of one key are counted
// and woken together), and the rest is what the count asks the Counter.
type Profile struct {
	Key           string
	Tags          []string
	RunUntagged   bool
	ProtectedOnly bool
}

// HeldRequest is one request the hub holds; Done tells the hub how it ended.
type HeldRequest struct {
	hub *Hub
	w   *waiter
}

// Wait holds the request of runner runnerID, of profile p, which saw version seen, until it
// is woken (true), max passes or ctx ends (false). When it returns true, the caller claims
// and then calls Done.
func (h *Hub) Wait(ctx context.Context, runnerID int64, p Profile, seen string, max time.Duration) (bool, HeldRequest) {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return false, HeldRequest{}
	}
	if h.missedLocked(seen) {
		h.mu.Unlock()
		return true, HeldRequest{}
	}
	w := &waiter{runnerID: runnerID, profile: p.Key, tags: p.Tags, runUntagged: p.RunUntagged,
		protectedOnly: p.ProtectedOnly, ch: make(chan struct{})}
	h.holdLocked(w, seen)
	h.mu.Unlock()

	timer := time.NewTimer(max)
	defer timer.Stop()
	select {
	case <-w.ch:
	case <-timer.C:
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !w.woken {
		h.remove(w)
		return false, HeldRequest{}
	}
	if ctx.Err() != nil {
		// Woken for a build it will not claim now: someone else must be.
		h.recountLocked(w)
		return false, HeldRequest{}
	}
	return true, HeldRequest{hub: h, w: w}
}

// Park holds the request of runner runnerID like Wait, without a goroutine: fn is called
// once, on a goroutine of its own, when the request is woken (true: the callee claims and
// then calls Done), or with false when max passes or the hub is released. A request that
// missed a change is not held: fn(true) runs at once, on the caller's goroutine.
//
// A parked request has no context: whoever answers it checks that its client still waits
// before claiming, and calls Done(false) if not, as Wait does for a request whose context
// ended after it was woken.
func (h *Hub) Park(runnerID int64, p Profile, seen string, max time.Duration, fn func(woken bool, held HeldRequest)) {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		fn(false, HeldRequest{})
		return
	}
	if h.missedLocked(seen) {
		h.mu.Unlock()
		fn(true, HeldRequest{})
		return
	}
	w := &waiter{runnerID: runnerID, profile: p.Key, tags: p.Tags, runUntagged: p.RunUntagged,
		protectedOnly: p.ProtectedOnly, fn: fn}
	w.timer = time.AfterFunc(max, func() { h.expire(w) })
	h.holdLocked(w, seen)
	h.mu.Unlock()
}

// expire ends a parked request whose time is up, unless it was woken first.
func (h *Hub) expire(w *waiter) {
	h.mu.Lock()
	if w.ended {
		h.mu.Unlock()
		return
	}
	w.ended = true
	h.remove(w)
	h.callLocked(func() { w.fn(false, HeldRequest{}) })
	h.mu.Unlock()
}

// missedLocked: the request saw a version older than the newest known, a change it has not
// seen: it claims at once.
func (h *Hub) missedLocked(seen string) bool {
	i := slices.Index(h.versions, seen)
	return i >= 0 && i != len(h.versions)-1
}

// holdLocked puts w at the end of its profile's list and makes sure the version is watched.
func (h *Hub) holdLocked(w *waiter, seen string) {
	pw := h.profileLocked(w)
	pw.list = append(pw.list, w)
	h.count++
	if !h.watching {
		h.watching = true
		go h.watch(seen)
	}
}

// Release ends every held request as if its time were up, and every later one at once: a
// replica that shuts down answers its held runners now instead of when their long poll
// ends (they ask again, elsewhere).
func (h *Hub) Release() {
	h.mu.Lock()
	h.released = true
	var ended []*waiter
	for key, p := range h.waiters {
		for _, w := range p.list {
			if w.fn == nil {
				close(w.ch) // not woken: Wait returns false
				continue
			}
			w.ended = true
			w.timer.Stop()
			ended = append(ended, w)
		}
		h.count -= len(p.list)
		p.list = nil
		h.dropIfEmpty(key, p)
	}
	for _, w := range ended {
		h.callLocked(func() { w.fn(false, HeldRequest{}) })
	}
	h.mu.Unlock()
}

// maxCallbacks bounds the parked requests' callbacks that run at once; the others queue.
// Wake-ups are counted and few, but a subscription that drops, or a replica that shuts
// down, ends every held request at once, and 10,000 callbacks that each wait for Redis and
// Postgres would be 10,000 goroutines again, the memory parking saves.
const maxCallbacks = 256

// callLocked runs fn on a goroutine of the bounded pool (maxCallbacks), or queues it.
func (h *Hub) callLocked(fn func()) {
	if h.calling >= maxCallbacks {
		h.calls = append(h.calls, fn)
		return
	}
	h.calling++
	go h.callLoop(fn)
}

// callLoop runs fn, then queued callbacks until none is left.
func (h *Hub) callLoop(fn func()) {
	for fn != nil {
		fn()
		h.mu.Lock()
		fn = nil
		if len(h.calls) > 0 {
			fn = h.calls[0]
			h.calls[0] = nil
			h.calls = h.calls[1:]
		} else {
			h.calling--
		}
		h.mu.Unlock()
	}
}

// Done: a woken request claimed a build (true) or did not.
func (q HeldRequest) Done(claimed bool) {
	if q.hub == nil {
		return
	}
	q.hub.mu.Lock()
	defer q.hub.mu.Unlock()
	if claimed {
		if p := q.hub.waiters[q.w.profile]; p != nil {
			p.backoff = recountMin
		}
		return
	}
	q.hub.recountLocked(q.w)
}

// Gone: a woken parked request found its client gone. What it was woken for is still
// there, so its profile is counted again at once, not after a backoff.
func (q HeldRequest) Gone() {
	if q.hub == nil {
		return
	}
	q.hub.mu.Lock()
	if q.hub.waiters[q.w.profile] != nil { // else nobody is left to wake
		q.hub.dirty[q.w.profile] = true
	}
	q.hub.mu.Unlock()
	q.hub.signal()
}

// profileLocked returns w's profile, created if need be.
func (h *Hub) profileLocked(w *waiter) *profileWaiters {
	p := h.waiters[w.profile]
	if p == nil {
		p = &profileWaiters{tags: w.tags, runUntagged: w.runUntagged, protectedOnly: w.protectedOnly, backoff: recountMin}
		h.waiters[w.profile] = p
	}
	return p
}

// remove takes a waiter that was not woken off its list.
func (h *Hub) remove(w *waiter) {
	p := h.waiters[w.profile]
	if p == nil {
		return
	}
	if i := slices.Index(p.list, w); i >= 0 {
		p.list = slices.Delete(p.list, i, i+1)
		h.count--
	}
	h.dropIfEmpty(w.profile, p)
}

func (h *Hub) dropIfEmpty(key string, p *profileWaiters) {
	if len(p.list) == 0 && p.recountAt.IsZero() {
		delete(h.waiters, key)
	}
}

// wakeLocked wakes up to n of a profile's waiters, oldest first (n < 0: all).
func (h *Hub) wakeLocked(key string, n int) {
	p := h.waiters[key]
	if p == nil {
		return
	}
	if n < 0 || n > len(p.list) {
		n = len(p.list)
	}
	for _, w := range p.list[:n] {
		w.wakeLocked(h)
	}
	p.list = slices.Delete(p.list, 0, n)
	h.count -= n
	h.dropIfEmpty(key, p)
}

func (h *Hub) wakeAllLocked() {
	for key := range h.waiters {
		h.wakeLocked(key, -1)
	}
}

// recountLocked plans a count of w's profile after its backoff, which then doubles: by
// then the runners whose woken requests took nothing wait again.
func (h *Hub) recountLocked(w *waiter) {
	key := w.profile
	p := h.profileLocked(w)
	if !p.recountAt.IsZero() {
		return // planned already
	}
	d := p.backoff
	p.backoff = min(2*p.backoff, recountMax)
	p.recountAt = time.Now().Add(d)
	time.AfterFunc(d, func() {
		h.mu.Lock()
		p.recountAt = time.Time{}
		h.dirty[key] = true
		h.dropIfEmpty(key, p)
		h.mu.Unlock()
		h.signal()
	})
}

func (h *Hub) signal() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// knownLocked records v as the newest version; it reports whether v was new.
func (h *Hub) knownLocked(v string) bool {
	if slices.Contains(h.versions, v) {
		return false
	}
	h.versions = append(h.versions, v)
	if len(h.versions) > knownVersions {
		h.versions = slices.Delete(h.versions, 0, len(h.versions)-knownVersions)
	}
	return true
}

// announced handles one bump heard on the feed.
func (h *Hub) announced(v string, runnerID int64) {
	if runnerID != 0 && h.forget != nil {
		h.forget(runnerID)
	}
	h.mu.Lock()
	h.knownLocked(v)
	if runnerID != 0 {
		for key, p := range h.waiters {
			for i := 0; i < len(p.list); {
				if w := p.list[i]; w.runnerID == runnerID {
					w.wakeLocked(h)
					p.list = slices.Delete(p.list, i, i+1)
					h.count--
					continue
				}
				i++
			}
			h.dropIfEmpty(key, p)
		}
	}
	if h.counter == nil {
		h.wakeAllLocked()
	} else {
		for key := range h.waiters {
			h.dirty[key] = true
		}
	}
	h.mu.Unlock()
	h.signal()
}

// watch reads the version every watchPeriod while requests are held: a version no
// announcement told of by the next read (an announcement may trail its SET by a moment), or
// any change while the feed is down, wakes everyone.
func (h *Hub) watch(seen string) {
	t := time.NewTicker(watchPeriod)
	defer t.Stop()
	last, suspect := seen, ""
	for range t.C {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := h.queue.Version(ctx)
		cancel()
		h.mu.Lock()
		if suspect != "" && !slices.Contains(h.versions, suspect) {
			h.knownLocked(suspect)
			h.wakeAllLocked()
		}
		suspect = ""
		if err == nil && v != last {
			switch {
			case !h.feedUp:
				h.knownLocked(v)
				h.wakeAllLocked()
			case !slices.Contains(h.versions, v):
				suspect = v
			}
			last = v
		}
		if h.count == 0 && suspect == "" {
			h.watching = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// countOnce counts every dirty profile and wakes as many of its waiters as it could claim
// builds; a profile whose count fails is woken whole.
func (h *Hub) countOnce(ctx context.Context) {
	h.mu.Lock()
	type job struct {
		key           string
		tags          []string
		runUntagged   bool
		protectedOnly bool
		n             int
	}
	var jobs []job
	for key := range h.dirty {
		if p := h.waiters[key]; p != nil && len(p.list) > 0 {
			jobs = append(jobs, job{key, p.tags, p.runUntagged, p.protectedOnly, len(p.list)})
		}
	}
	clear(h.dirty)
	h.mu.Unlock()
	for _, j := range jobs {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := h.counter.CountClaimable(cctx, j.tags, j.runUntagged, j.protectedOnly, j.n)
		cancel()
		if err != nil {
			h.log.WarnContext(ctx, "claimable builds not counted; waking the profile's held requests", "error", err)
			n = -1
		}
		h.mu.Lock()
		h.wakeLocked(j.key, n)
		if p := h.waiters[j.key]; p != nil && n == 0 {
			p.backoff = recountMin
		}
		h.mu.Unlock()
	}
}

// Run keeps the subscription and counts what it announces until ctx ends.
func (h *Hub) Run(ctx context.Context, feed Feed) error {
	if h.counter != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-h.kick:
					h.countOnce(ctx)
				}
			}
		}()
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := feed.SubscribeQueue(ctx, func() {
			// The version current as the subscription starts is known: a request that
			// echoes it once a later bump is announced claims at once.
			vctx, cancel := context.WithTimeout(ctx, time.Second)
			v, verr := h.queue.Version(vctx)
			cancel()
			h.mu.Lock()
			if verr == nil {
				h.knownLocked(v)
			}
			h.feedUp = true
			// Bumps may have gone unheard until now.
			h.wakeAllLocked()
			h.mu.Unlock()
			backoff = 100 * time.Millisecond
		}, h.announced)
		h.mu.Lock()
		h.feedUp = false
		h.wakeAllLocked()
		h.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		h.log.WarnContext(ctx, "queue bumps not heard; held job requests wake on any change", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// FeedLive reports whether the subscription to queue bumps is up.
func (h *Hub) FeedLive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.feedUp
}

// Held returns how many requests are held right now.
func (h *Hub) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}
