package builds

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// versionWatcher lets many held job requests wait for the queue version to change while
// only one goroutine per replica reads it from Redis.
type versionWatcher struct {
	queue Queue
	log   *slog.Logger

	mu      sync.Mutex
	current string
	changed chan struct{} // closed when the version moves away from current
	waiters int
}

// watchPeriod is how often the shared watcher reads the version while requests are held.
const watchPeriod = 200 * time.Millisecond

func newVersionWatcher(q Queue, log *slog.Logger) *versionWatcher {
	return &versionWatcher{queue: q, log: log}
}

// wait blocks until the version differs from seen (true), max passes or ctx ends (false).
func (w *versionWatcher) wait(ctx context.Context, seen string, max time.Duration) (bool, error) {
	w.mu.Lock()
	if w.changed == nil || w.current != seen {
		if w.changed != nil && w.current != seen {
			// Another waiter already saw a newer version.
			w.mu.Unlock()
			return true, nil
		}
		w.current = seen
		w.changed = make(chan struct{})
		go w.run(w.changed)
	}
	ch := w.changed
	w.waiters++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waiters--
		w.mu.Unlock()
	}()

	timer := time.NewTimer(max)
	defer timer.Stop()
	select {
	case <-ch:
		return true, nil
	case <-timer.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// run polls the version until it changes or nobody waits any more.
func (w *versionWatcher) run(ch chan struct{}) {
	ticker := time.NewTicker(watchPeriod)
	defer ticker.Stop()
	for range ticker.C {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := w.queue.Version(ctx)
		cancel()
		w.mu.Lock()
		if w.changed != ch {
			w.mu.Unlock()
			return
		}
		if err == nil && v != w.current {
			w.current = v
			close(ch)
			w.changed = nil
			w.mu.Unlock()
			return
		}
		if w.waiters == 0 {
			w.changed = nil
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// count returns how many requests are held right now.
func (w *versionWatcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiters
}

// LongPollWaiters is how many idle job requests this replica holds (JOBAPI_LONG_POLL).
func (s *Service) LongPollWaiters() int { return s.watchers.count() }
