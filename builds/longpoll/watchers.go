package longpoll

import (
	"sync"
	"sync/atomic"
)

// Watchers fans "id changed" events out to the waiters of this replica (the pipeline waits:
// an id is a pipeline's). An event is a hint that wakes waiters early, never the source of
// their answer; Healthy says whether events flow, so that waiters poll faster when not.
type Watchers struct {
	mu      sync.Mutex
	waiters map[int64]map[chan struct{}]struct{}
	healthy atomic.Bool
}

// NewWatchers returns watchers without a waiter, not healthy.
func NewWatchers() *Watchers {
	return &Watchers{waiters: map[int64]map[chan struct{}]struct{}{}}
}

// Watch returns a channel signalled when id changes, and the func that stops the watch.
func (h *Watchers) Watch(id int64) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.waiters[id] == nil {
		h.waiters[id] = map[chan struct{}]struct{}{}
	}
	h.waiters[id][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.waiters[id], ch)
		if len(h.waiters[id]) == 0 {
			delete(h.waiters, id)
		}
		h.mu.Unlock()
	}
}

// Notify signals the waiters of id.
func (h *Watchers) Notify(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[id] {
		select {
		case ch <- struct{}{}:
		default: // already signalled
		}
	}
}

// WakeAll wakes every waiter: after the subscription broke, events may have been missed.
func (h *Watchers) WakeAll() {
	h.mu.Lock()
	ids := make([]int64, 0, len(h.waiters))
	for id := range h.waiters {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.Notify(id)
	}
}

// SetHealthy records whether events flow (the subscription is live).
func (h *Watchers) SetHealthy(up bool) { h.healthy.Store(up) }

// Healthy reports whether events flow.
func (h *Watchers) Healthy() bool { return h.healthy.Load() }

// Len is how many waits are watching.
func (h *Watchers) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, chans := range h.waiters {
		n += len(chans)
	}
	return n
}
