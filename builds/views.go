package builds

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"
)

// Views are the reads the operator web UI needs beyond the Store: listings across
// pipelines, ranges of a log, and recent history across builds. Every one is bounded (a
// page, a byte range, a window of recent events), so that a page stays cheap however large
// the tables and logs grow.
type Views interface {
	// Pipelines lists pipelines, newest first, without their builds; more reports whether
	// another page follows (no count: counting a large table is what pages avoid).
	Pipelines(ctx context.Context, f PipelineFilter, p Page) (list []Pipeline, more bool, err error)
	// PipelineSummaries reads what a listing shows of the given pipelines' latest jobs.
	PipelineSummaries(ctx context.Context, ids []int64) (map[int64]PipelineSummary, error)
	// TraceRange returns up to max bytes of a build's log from offset from, and the size
	// of the whole log. ErrNotFound when there is no such build.
	TraceRange(ctx context.Context, id, from, max int64) (data []byte, size int64, err error)
	// TraceLines counts the line breaks in the first before bytes of a build's log.
	TraceLines(ctx context.Context, id, before int64) (int64, error)
	// RecentEvents returns up to limit events of the given types among the most recent
	// window events of all builds, newest first.
	RecentEvents(ctx context.Context, types []string, window, limit int) ([]BuildEvent, error)
	// AckLatencies returns the assign-to-ack seconds of the acknowledgements among the most
	// recent window events, in no particular order.
	AckLatencies(ctx context.Context, window int) ([]float64, error)
}

// PipelineFilter selects pipelines for a listing; zero fields match everything.
type PipelineFilter struct {
	ProjectID int64
	Status    string
}

// PipelineSummary is what a pipeline listing shows of a pipeline's latest jobs without
// reading them: whether one failed and was allowed to (GitLab's "passed with warnings"),
// and their average coverage (nil: none has one), as Pipeline.Coverage computes it.
type PipelineSummary struct {
	Warnings bool
	Coverage *float64
}

// BuildEvent is an event with the build it belongs to, for lists across builds.
type BuildEvent struct {
	Event
	ProjectID  int64
	PipelineID int64
	Name       string
	Attempt    int
}

// RecentWindow is how many of the latest events the views across builds look at: enough
// for the last hour of a busy fleet, and a bounded read of the event table's primary key.
const RecentWindow = 50_000

func (s *Service) viewStore() (Views, error) {
	if s.views == nil {
		return nil, fmt.Errorf("operator views: %w", ErrUnavailable)
	}
	return s.views, nil
}

// Pipelines lists pipelines, newest first.
func (s *Service) Pipelines(ctx context.Context, f PipelineFilter, p Page) ([]Pipeline, bool, error) {
	v, err := s.viewStore()
	if err != nil {
		return nil, false, err
	}
	return v.Pipelines(ctx, f, p)
}

// PipelineSummaries reads the warnings and coverage of the listed pipelines.
func (s *Service) PipelineSummaries(ctx context.Context, ids []int64) (map[int64]PipelineSummary, error) {
	v, err := s.viewStore()
	if err != nil {
		return nil, err
	}
	return v.PipelineSummaries(ctx, ids)
}

// LiveTraceRange returns up to max bytes of a build's live log (not archived) from offset
// from, and the log's size: Postgres's chunks completed with the tail in Redis.
func (s *Service) LiveTraceRange(ctx context.Context, id, from, max int64) ([]byte, int64, error) {
	v, err := s.viewStore()
	if err != nil {
		return nil, 0, err
	}
	tail := s.readTail(ctx, id) // first: see logReader
	data, size, err := v.TraceRange(ctx, id, from, max)
	if err != nil {
		return nil, 0, err
	}
	data, size = traceRangeLive(tail, data, size, from, max)
	return data, size, nil
}

// LiveTraceLines counts the line breaks before offset before in a build's live log.
func (s *Service) LiveTraceLines(ctx context.Context, id, before int64) (int64, error) {
	v, err := s.viewStore()
	if err != nil {
		return 0, err
	}
	if before <= 0 {
		return 0, nil
	}
	tail := s.readTail(ctx, id)
	if !tail.ok || before <= tail.base {
		return v.TraceLines(ctx, id, before)
	}
	// Lines past the durable size are in the tail only.
	_, durable, err := v.TraceRange(ctx, id, 0, 0)
	if err != nil {
		return 0, err
	}
	n, err := v.TraceLines(ctx, id, min(before, durable))
	if err != nil {
		return 0, err
	}
	return n + int64(bytes.Count(tail.slice(max(durable, tail.base), before), []byte{'\n'})), nil
}

// RecentEvents returns up to limit of the latest events of the given types, newest first.
func (s *Service) RecentEvents(ctx context.Context, types []string, limit int) ([]BuildEvent, error) {
	v, err := s.viewStore()
	if err != nil {
		return nil, err
	}
	return v.RecentEvents(ctx, types, RecentWindow, limit)
}

// AckLatency summarises the assign-to-ack latency of recent acknowledgements, fleet-wide
// (it is read from the builds' events, which every replica writes).
type AckLatency struct {
	Samples       int
	P50, P90, P99 time.Duration
	Max           time.Duration
}

// AckLatencies reads the latency of the recent acknowledgements.
func (s *Service) AckLatencies(ctx context.Context) (AckLatency, error) {
	v, err := s.viewStore()
	if err != nil {
		return AckLatency{}, err
	}
	secs, err := v.AckLatencies(ctx, RecentWindow)
	if err != nil {
		return AckLatency{}, err
	}
	return summarise(secs), nil
}

// summarise takes the nearest-rank percentiles of samples in seconds.
func summarise(secs []float64) AckLatency {
	out := AckLatency{Samples: len(secs)}
	if len(secs) == 0 {
		return out
	}
	sorted := slices.Clone(secs)
	slices.Sort(sorted)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(sorted)) + 0.999999)
		i = min(max(i, 1), len(sorted))
		return time.Duration(sorted[i-1] * float64(time.Second))
	}
	out.P50, out.P90, out.P99 = rank(0.50), rank(0.90), rank(0.99)
	out.Max = time.Duration(sorted[len(sorted)-1] * float64(time.Second))
	return out
}
