package builds

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// PipelineEvents carries "a build of pipeline N changed" between replicas (Redis pub/sub).
// It is a hint that wakes waiters early, never the source of their answer: progress is read
// from Postgres, and waiters poll when no event comes.
type PipelineEvents interface {
	Publish(ctx context.Context, pipelineID int64) error
	// Subscribe calls ready once the subscription is live, then delivers events to fn
	// until ctx ends or the subscription breaks (error).
	Subscribe(ctx context.Context, ready func(), fn func(pipelineID int64)) error
}

// Waiter poll periods: the safety net while events flow, and the pace without them.
const (
	waitPollHealthy   = 2 * time.Second
	waitPollUnhealthy = 250 * time.Millisecond
	// MaxWait bounds one wait request; callers loop.
	MaxWait = 10 * time.Minute
)

// pipelineHub fans events out to the waiters of this replica.
type pipelineHub struct {
	mu      sync.Mutex
	waiters map[int64]map[chan struct{}]struct{}
	healthy atomic.Bool
}

func newPipelineHub() *pipelineHub {
	return &pipelineHub{waiters: map[int64]map[chan struct{}]struct{}{}}
}

func (h *pipelineHub) watch(id int64) (chan struct{}, func()) {
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

func (h *pipelineHub) notify(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[id] {
		select {
		case ch <- struct{}{}:
		default: // already signalled
		}
	}
}

// wakeAll wakes every waiter: after the subscription broke, events may have been missed.
func (h *pipelineHub) wakeAll() {
	h.mu.Lock()
	ids := make([]int64, 0, len(h.waiters))
	for id := range h.waiters {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.notify(id)
	}
}

// RunPipelineEvents keeps the subscription alive until ctx ends, resubscribing with backoff
// (Redis restarting, LOADING, failover) while waiters fall back to fast polling.
func (s *Service) RunPipelineEvents(ctx context.Context) error {
	if s.events == nil {
		<-ctx.Done()
		return nil
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := s.events.Subscribe(ctx, func() { s.hub.healthy.Store(true) }, s.hub.notify)
		s.hub.healthy.Store(false)
		s.hub.wakeAll()
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		s.log.WarnContext(ctx, "pipeline events unavailable; waiters poll Postgres", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// notifyPipelines publishes "something changed" for each pipeline, best effort.
func (s *Service) notifyPipelines(ctx context.Context, ids ...int64) {
	if s.events == nil {
		return
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if id == 0 || seen[id] {
			continue
		}
		seen[id] = true
		if err := s.events.Publish(ctx, id); err != nil {
			s.log.DebugContext(ctx, "pipeline event not published; waiters will poll", "pipeline_id", id, "error", err)
			return
		}
	}
}

// NotifyPipelines is for workers that finish builds outside the service (sweeper, reapers).
func (s *Service) NotifyPipelines(ctx context.Context, ids []int64) { s.notifyPipelines(ctx, ids...) }

// WaitResult is the answer to a pipeline wait.
type WaitResult struct {
	Status        string
	JobsRemaining int
	Finished      []int64
}

func pipelineDone(p PipelineProgress) bool {
	switch p.Status {
	case PipelineSuccess, PipelineFailed, PipelineCanceled:
		return true
	}
	return p.Remaining == 0
}

// WaitPipeline blocks until the pipeline finishes or timeout passes and reports its
// progress, read from Postgres at the end, so nothing a Redis failure drops is lost.
func (s *Service) WaitPipeline(ctx context.Context, projectID, id int64, timeout time.Duration) (WaitResult, error) {
	timeout = min(timeout, MaxWait)
	deadline := time.Now().Add(timeout)
	wake, stop := s.hub.watch(id)
	defer stop()
	for {
		p, err := s.store.PipelineProgress(ctx, projectID, id)
		if err != nil {
			return WaitResult{}, err
		}
		left := time.Until(deadline)
		if pipelineDone(p) || left <= 0 {
			return WaitResult{Status: p.Status, JobsRemaining: p.Remaining, Finished: p.Finished}, nil
		}
		poll := waitPollHealthy
		if !s.hub.healthy.Load() {
			poll = waitPollUnhealthy
		}
		timer := time.NewTimer(min(poll, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return WaitResult{Status: p.Status, JobsRemaining: p.Remaining, Finished: p.Finished}, nil
			}
			return WaitResult{}, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// PipelineWaiters is how many pipeline wait requests this replica holds.
func (s *Service) PipelineWaiters() int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	n := 0
	for _, chans := range s.hub.waiters {
		n += len(chans)
	}
	return n
}
