package webui

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Hub fans the replica's one subscription to the change hints out to the browsers on live
// pages: a hundred open tabs cost one Redis subscription and a hundred idle streams, and a
// hint wakes only the streams whose page shows what changed. While the subscription is
// down, every stream is woken every few seconds instead, so pages keep up by reloading.
type Hub struct {
	subscribe func(ctx context.Context, ready func(), fn func(builds.Change)) error
	log       *slog.Logger

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	// healthy: the subscription is live, hints arrive.
	healthy atomic.Bool
	done    chan struct{}
	// Delivered counts hints that woke at least one stream (tests, metrics).
	Delivered atomic.Int64
}

// topic is what one page shows: every pipeline (lists), one pipeline, or one job (which
// also wakes on its pipeline's events, where its finish is announced).
type topic struct {
	all      bool
	pipeline int64
	build    int64
}

func (t topic) matches(c builds.Change) bool {
	switch {
	case t.build != 0:
		return c.BuildID == t.build || (c.PipelineID == t.pipeline && c.BuildID == 0)
	case t.pipeline != 0:
		return c.PipelineID == t.pipeline
	}
	return t.all && c.PipelineID != 0
}

type subscriber struct {
	topic topic
	wake  chan struct{}
}

// Poll periods of a stream while the subscription is down, and the longest silence before
// a comment keeps proxies from closing an idle stream.
const (
	unhealthyPoll = 3 * time.Second
	heartbeat     = 25 * time.Second
)

// NewHub returns a hub fed by subscribe (builds.Service.SubscribeChanges); run Run.
func NewHub(subscribe func(ctx context.Context, ready func(), fn func(builds.Change)) error, log *slog.Logger) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{subscribe: subscribe, log: log, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
}

// Run keeps the subscription alive until ctx ends, resubscribing with backoff, and then
// ends every open stream so that the server's shutdown does not wait for them.
func (h *Hub) Run(ctx context.Context) error {
	defer close(h.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := h.subscribe(ctx, func() { h.healthy.Store(true) }, h.publish)
		h.healthy.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		h.wakeAll() // hints may have been missed
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		h.log.WarnContext(ctx, "live page updates unavailable; pages poll", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// Healthy reports whether hints are arriving.
func (h *Hub) Healthy() bool { return h.healthy.Load() }

// Streams is how many live pages this replica serves.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *Hub) publish(c builds.Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	woke := false
	for s := range h.subs {
		if s.topic.matches(c) {
			woke = true
			select {
			case s.wake <- struct{}{}:
			default: // already woken
			}
		}
	}
	if woke {
		h.Delivered.Add(1)
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (h *Hub) add(t topic) (*subscriber, func()) {
	s := &subscriber{topic: t, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s, func() {
		h.mu.Lock()
		delete(h.subs, s)
		h.mu.Unlock()
	}
}

// minGap is the shortest time between two notifications of one stream per kind of page: a
// busy fleet changes some pipeline many times a second, and a list that reloads twice a
// second is as live as anyone can read.
func minGap(t topic) time.Duration {
	switch {
	case t.build != 0:
		return 300 * time.Millisecond
	case t.pipeline != 0:
		return time.Second
	}
	return 2 * time.Second
}

// events is the live pages' Server-Sent Events stream: "change" when what the page shows
// changed (the page then fetches its live part), comments to keep the connection open.
func (u *UI) events(w http.ResponseWriter, r *http.Request) {
	if u.hub == nil {
		u.errorPage(w, r, http.StatusNotImplemented, "Live updates are off on this replica.")
		return
	}
	t, err := u.topicOf(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	sub, stop := u.hub.add(t)
	defer stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on at once
	w.WriteHeader(http.StatusOK)
	// A reconnecting browser waits 2 s; the page reloads its live part on (re)connect, so
	// nothing that changed in between is lost.
	_, _ = fmt.Fprint(w, "retry: 2000\n\n")
	if err := rc.Flush(); err != nil {
		u.log.ErrorContext(r.Context(), "event stream cannot be flushed", "error", err)
		return
	}
	gap := minGap(t)
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	poll := time.NewTicker(unhealthyPoll)
	defer poll.Stop()
	var last time.Time
	for {
		select {
		case <-r.Context().Done():
			return
		case <-u.hub.done:
			return
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			_ = rc.Flush()
			continue
		case <-poll.C:
			if u.hub.Healthy() {
				continue
			}
		case <-sub.wake:
		}
		if wait := gap - time.Since(last); wait > 0 {
			// Coalesce: whatever else changes meanwhile is in the one fetch that follows.
			select {
			case <-r.Context().Done():
				return
			case <-u.hub.done:
				return
			case <-time.After(wait):
			}
			select {
			case <-sub.wake:
			default:
			}
		}
		last = time.Now()
		if _, err := fmt.Fprint(w, "event: change\ndata: {}\n\n"); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// topicOf reads the stream's query: pipelines, pipeline=N, or job=N&pipeline=M.
func (u *UI) topicOf(r *http.Request) (topic, error) {
	q := r.URL.Query()
	parse := func(name string) (int64, error) {
		v, err := strconv.ParseInt(q.Get(name), 10, 64)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("%s must be a positive id: %w", name, builds.ErrNotFound)
		}
		return v, nil
	}
	switch {
	case q.Has("job"):
		b, err := parse("job")
		if err != nil {
			return topic{}, err
		}
		p, err := parse("pipeline")
		return topic{build: b, pipeline: p}, err
	case q.Has("pipeline"):
		p, err := parse("pipeline")
		return topic{pipeline: p}, err
	}
	return topic{all: true}, nil
}
