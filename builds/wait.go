package builds

import (
	"context"
	"errors"
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
		err := s.events.Subscribe(ctx, func() { s.hub.SetHealthy(true) }, s.hub.Notify)
		s.hub.SetHealthy(false)
		s.hub.WakeAll()
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
	wake, stop := s.hub.Watch(id)
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
		if !s.hub.Healthy() {
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
func (s *Service) PipelineWaiters() int { return s.hub.Len() }
