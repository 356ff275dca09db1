package builds

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// The long poll (JOBAPI_LONG_POLL) holds idle job requests until the queue changes. Waking
// every held request on every change sends the whole fleet to Postgres for each new build,
// one of them wins and the rest come back (a thundering herd). Instead each replica hears
// every bump on one subscription (QueueFeed: SET and PUBLISH in one MULTI), counts once per
// runner profile (tags, run_untagged, access_level: what the claim matches on) how many
// pending builds a claim of that profile could take (ClaimCounter, the claim's own
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

// QueueFeed announces queue bumps between replicas (Redis pub/sub).
type QueueFeed interface {
	// BumpAnnounced sets a new queue version and announces it; runnerID, when not 0, names
	// the runner whose settings or token changed.
	BumpAnnounced(ctx context.Context, runnerID int64) error
	// SubscribeQueue calls ready once the subscription is live, then fn for every bump
	// until ctx ends (nil) or the connection fails (an error).
	SubscribeQueue(ctx context.Context, ready func(), fn func(version string, runnerID int64)) error
}

// ClaimCounter counts what a claim could take (pgstore): how many pending builds a runner
// with these tags, run_untagged setting and access level (protectedOnly: ref_protected)
// could claim, up to limit.
type ClaimCounter interface {
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
	ch            chan struct{} // closed when woken
	woken         bool
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

type wakeHub struct {
	queue   Queue
	counter ClaimCounter // nil: wake everyone
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
}

func newWakeHub(q Queue, counter ClaimCounter, forget func(int64), log *slog.Logger) *wakeHub {
	return &wakeHub{queue: q, counter: counter, forget: forget, log: log,
		waiters: map[string]*profileWaiters{}, dirty: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// profileKey is what a claim matches a runner on: its tags, run_untagged and access level.
// Runners of one profile share the long poll's counts, the claim flights and the
// empty-profile record; a ref_protected runner must not be answered for a not_protected one.
func profileKey(r Runner) string {
	tags := slices.Clone(r.Tags)
	slices.Sort(tags)
	tags = slices.Compact(tags)
	u := "0"
	if r.RunUntagged {
		u = "1"
	}
	if r.ProtectedOnly() {
		u += "p"
	}
	return u + "\x00" + strings.Join(tags, "\x00")
}

// heldRequest is one request the hub holds; done tells the hub how it ended.
type heldRequest struct {
	hub *wakeHub
	w   *waiter
}

// wait holds r's request, which saw version seen, until it is woken (true), max passes or
// ctx ends (false). When it returns true, the caller claims and then calls done.
func (h *wakeHub) wait(ctx context.Context, r Runner, seen string, max time.Duration) (bool, heldRequest) {
	h.mu.Lock()
	if i := slices.Index(h.versions, seen); i >= 0 && i != len(h.versions)-1 {
		// A change this request has not seen: claim at once.
		h.mu.Unlock()
		return true, heldRequest{}
	}
	w := &waiter{runnerID: r.ID, profile: profileKey(r), tags: r.Tags, runUntagged: r.RunUntagged,
		protectedOnly: r.ProtectedOnly(), ch: make(chan struct{})}
	p := h.profileLocked(w)
	p.list = append(p.list, w)
	h.count++
	if !h.watching {
		h.watching = true
		go h.watch(seen)
	}
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
		return false, heldRequest{}
	}
	if ctx.Err() != nil {
		// Woken for a build it will not claim now: someone else must be.
		h.recountLocked(w)
		return false, heldRequest{}
	}
	return true, heldRequest{hub: h, w: w}
}

// done: a woken request claimed a build (true) or did not.
func (q heldRequest) done(claimed bool) {
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

// profileLocked returns w's profile, created if need be.
func (h *wakeHub) profileLocked(w *waiter) *profileWaiters {
	p := h.waiters[w.profile]
	if p == nil {
		p = &profileWaiters{tags: w.tags, runUntagged: w.runUntagged, protectedOnly: w.protectedOnly, backoff: recountMin}
		h.waiters[w.profile] = p
	}
	return p
}

// remove takes a waiter that was not woken off its list.
func (h *wakeHub) remove(w *waiter) {
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

func (h *wakeHub) dropIfEmpty(key string, p *profileWaiters) {
	if len(p.list) == 0 && p.recountAt.IsZero() {
		delete(h.waiters, key)
	}
}

// wakeLocked wakes up to n of a profile's waiters, oldest first (n < 0: all).
func (h *wakeHub) wakeLocked(key string, n int) {
	p := h.waiters[key]
	if p == nil {
		return
	}
	if n < 0 || n > len(p.list) {
		n = len(p.list)
	}
	for _, w := range p.list[:n] {
		w.woken = true
		close(w.ch)
	}
	p.list = slices.Delete(p.list, 0, n)
	h.count -= n
	h.dropIfEmpty(key, p)
}

func (h *wakeHub) wakeAllLocked() {
	for key := range h.waiters {
		h.wakeLocked(key, -1)
	}
}

// recountLocked plans a count of w's profile after its backoff, which then doubles: by
// then the runners whose woken requests took nothing wait again.
func (h *wakeHub) recountLocked(w *waiter) {
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

func (h *wakeHub) signal() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// knownLocked records v as the newest version; it reports whether v was new.
func (h *wakeHub) knownLocked(v string) bool {
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
func (h *wakeHub) announced(v string, runnerID int64) {
	if runnerID != 0 && h.forget != nil {
		h.forget(runnerID)
	}
	h.mu.Lock()
	h.knownLocked(v)
	if runnerID != 0 {
		for key, p := range h.waiters {
			for i := 0; i < len(p.list); {
				if w := p.list[i]; w.runnerID == runnerID {
					w.woken = true
					close(w.ch)
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
func (h *wakeHub) watch(seen string) {
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
func (h *wakeHub) countOnce(ctx context.Context) {
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

// run keeps the subscription and counts what it announces until ctx ends.
func (h *wakeHub) run(ctx context.Context, feed QueueFeed) error {
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

// feedLive reports whether the subscription to queue bumps is up.
func (h *wakeHub) feedLive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.feedUp
}

// held returns how many requests are held right now.
func (h *wakeHub) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// LongPollWaiters is how many idle job requests this replica holds (JOBAPI_LONG_POLL).
func (s *Service) LongPollWaiters() int { return s.wakes.held() }

// RunQueueFeed keeps this replica's subscription to queue bumps, which wakes held long
// polls, until ctx ends (without a feed it waits: the version reads wake them).
func (s *Service) RunQueueFeed(ctx context.Context) error {
	if s.queueFeed == nil {
		<-ctx.Done()
		return nil
	}
	return s.wakes.run(ctx, s.queueFeed)
}

// bumpRunner bumps the queue version for a change of runner id's settings or token: every
// replica drops its cached copy and wakes that runner's held requests.
func (s *Service) bumpRunner(ctx context.Context, id int64) {
	if s.queueFeed == nil {
		s.bumpQueue(ctx)
		return
	}
	for i := 0; i < 2; i++ {
		if err := s.queueFeed.BumpAnnounced(ctx, id); err == nil {
			return
		} else if i == 1 {
			s.log.WarnContext(ctx, "queue version not bumped; idle runners may see the runner's change late", "runner_id", id, "error", err)
		}
	}
}
