package builds

import (
	"context"
	"sync"
	"time"
)

// Change is a hint for live views (the web UI) that a build or its pipeline changed, or
// that a build's log grew. Like PipelineEvents it is never the source of an answer: a view
// that gets one reads Postgres again, and one that misses one reads it at its next poll.
type Change struct {
	// PipelineID is 0 when the change is only a log's growth (the append does not read the
	// build's pipeline, and no pipeline view shows logs).
	PipelineID int64
	BuildID    int64
	// Log: the build's log grew.
	Log bool
}

// ChangeFeed carries Changes between replicas (Redis pub/sub).
type ChangeFeed interface {
	// PublishChanges announces a batch of changes in one message.
	PublishChanges(ctx context.Context, changes []Change) error
	// SubscribeChanges calls ready once the subscription is live, then delivers every
	// Change and every PipelineEvents event (as a Change with only PipelineID) to fn until
	// ctx ends or the subscription breaks (error).
	SubscribeChanges(ctx context.Context, ready func(), fn func(Change)) error
}

// changeFlushPeriod batches the hints of a replica: the runner's hot paths (claim, ack,
// trace patch) only add to a set in memory, and one message a period carries them all, so
// a busy fleet costs Redis a few messages a second per replica, not one per request.
const changeFlushPeriod = 100 * time.Millisecond

// maxPendingChanges bounds the set while the feed is down or nobody flushes it: hints past
// it are dropped, and live views catch up at their next poll.
const maxPendingChanges = 10_000

type changeBatch struct {
	mu      sync.Mutex
	pending map[Change]struct{}
}

// changed records a hint for the next flush (nothing when no feed is configured).
func (s *Service) changed(c Change) {
	if s.changes == nil {
		return
	}
	s.batch.mu.Lock()
	if len(s.batch.pending) < maxPendingChanges {
		s.batch.pending[c] = struct{}{}
	}
	s.batch.mu.Unlock()
}

// RunChangeFeed publishes the recorded hints every changeFlushPeriod until ctx ends.
func (s *Service) RunChangeFeed(ctx context.Context) error {
	if s.changes == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(changeFlushPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.FlushChanges(ctx)
		}
	}
}

// FlushChanges publishes the hints recorded since the last flush, best effort: a failure
// is logged and the hints are dropped (live views poll while their stream is unhealthy).
func (s *Service) FlushChanges(ctx context.Context) int {
	if s.changes == nil {
		return 0
	}
	s.batch.mu.Lock()
	if len(s.batch.pending) == 0 {
		s.batch.mu.Unlock()
		return 0
	}
	batch := make([]Change, 0, len(s.batch.pending))
	for c := range s.batch.pending {
		batch = append(batch, c)
	}
	clear(s.batch.pending)
	s.batch.mu.Unlock()
	if err := s.changes.PublishChanges(ctx, batch); err != nil {
		s.log.DebugContext(ctx, "change hints not published; live views will poll", "count", len(batch), "error", err)
	}
	return len(batch)
}

// SubscribeChanges delivers the fleet's change hints (see ChangeFeed); ErrUnavailable when
// no feed is configured.
func (s *Service) SubscribeChanges(ctx context.Context, ready func(), fn func(Change)) error {
	if s.changes == nil {
		return ErrUnavailable
	}
	return s.changes.SubscribeChanges(ctx, ready, fn)
}
