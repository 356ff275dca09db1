// Package views holds the operator web UI's reads across builds that a GitLab client never
// asks for: the pipeline listing with its summaries, the latest events of interest across
// every build, and the fleet's assign-to-ack latency. Every read is bounded (a page, a window
// of recent events), so that a page stays cheap however large the tables grow. The reads are
// the store's; builds never imports this package. Beside them, the durations every view of a
// job or a pipeline shows (GitLab's duration and queued_duration), computed from what a read
// brought: the API's, the web UI's and webhook payloads'.
package views

import (
	"context"
	"slices"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Store makes the bounded reads the web UI's pages need beyond builds.Store.
type Store interface {
	// Pipelines lists pipelines, newest first, without their builds; more reports whether
	// another page follows (no count: counting a large table is what pages avoid).
	Pipelines(ctx context.Context, f PipelineFilter, p builds.Page) (list []builds.Pipeline, more bool, err error)
	// PipelineSummaries reads what a listing shows of the given pipelines' latest jobs.
	PipelineSummaries(ctx context.Context, ids []int64) (map[int64]PipelineSummary, error)
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
	builds.Event
	ProjectID  int64
	PipelineID int64
	Name       string
	Attempt    int
}

// RecentWindow is how many of the latest events the views across builds look at: enough
// for the last hour of a busy fleet, and a bounded read of the event table's primary key.
const RecentWindow = 50_000

// Deps are what a Service is built from; every field is required.
type Deps struct {
	Store Store
}

// Service serves the web UI's reads across builds.
type Service struct {
	store Store
}

// New builds the Service; it panics without its store, as a wiring mistake.
func New(d Deps) *Service {
	if d.Store == nil {
		panic("views.New: Deps.Store is required")
	}
	return &Service{store: d.Store}
}

// Pipelines lists pipelines, newest first.
func (s *Service) Pipelines(ctx context.Context, f PipelineFilter, p builds.Page) ([]builds.Pipeline, bool, error) {
	return s.store.Pipelines(ctx, f, p)
}

// PipelineSummaries reads the warnings and coverage of the listed pipelines.
func (s *Service) PipelineSummaries(ctx context.Context, ids []int64) (map[int64]PipelineSummary, error) {
	return s.store.PipelineSummaries(ctx, ids)
}

// RecentEvents returns up to limit of the latest events of the given types, newest first.
func (s *Service) RecentEvents(ctx context.Context, types []string, limit int) ([]BuildEvent, error) {
	return s.store.RecentEvents(ctx, types, RecentWindow, limit)
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
	secs, err := s.store.AckLatencies(ctx, RecentWindow)
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
