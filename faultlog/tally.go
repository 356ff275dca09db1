// Package faultlog logs the faults a hot path repeats as counts per interval instead of a
// line per request. It knows nothing of builds or HTTP: the domain's Redis fallbacks and the
// handlers' degraded requests and throttled webhooks each keep a Tally of their own.
package faultlog

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Tally logs a fault that repeats on the hot path once per interval, as a count,
// instead of once per request: under overload the per-request warnings (one per job
// request that could not read the queue version, thousands a minute) cost CPU and disk
// when there is none to spare and bury what happened. The first occurrence after a quiet
// interval is logged at once, so a fault is seen without delay; the repeats are summed and
// logged when the interval ends, with the last error of each kind.
type Tally struct {
	log      *slog.Logger
	msg      string
	interval time.Duration

	mu      sync.Mutex
	counts  map[string]int64
	lastErr map[string]string
	armed   bool // a summary is planned
	quietAt time.Time
}

// DefaultInterval is how often a Tally logs its summary.
const DefaultInterval = 10 * time.Second

// NewTally logs under msg (e.g. "job requests degraded") every interval (0:
// DefaultInterval) at most.
func NewTally(log *slog.Logger, msg string, interval time.Duration) *Tally {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tally{log: log, msg: msg, interval: interval, counts: map[string]int64{}, lastErr: map[string]string{}}
}

// Count records one occurrence of what (a short name: "queue_version_unavailable"), with
// its error if any.
func (t *Tally) Count(ctx context.Context, what string, err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.armed && time.Since(t.quietAt) >= t.interval {
		// The first after a quiet interval: said at once.
		t.armed = true
		args := []any{"what", what}
		if err != nil {
			args = append(args, "error", err.Error())
		}
		t.log.WarnContext(ctx, t.msg+" (repeats are counted and logged every "+t.interval.String()+")", args...)
		time.AfterFunc(t.interval, t.flush)
		return
	}
	t.counts[what]++
	if err != nil {
		t.lastErr[what] = err.Error()
	}
	if !t.armed {
		t.armed = true
		time.AfterFunc(t.interval, t.flush)
	}
}

// flush logs what was counted since the last summary, if anything.
func (t *Tally) flush() {
	t.mu.Lock()
	counts, lastErr := t.counts, t.lastErr
	t.counts, t.lastErr = map[string]int64{}, map[string]string{}
	if len(counts) == 0 {
		t.armed = false
		t.quietAt = time.Now()
		t.mu.Unlock()
		return
	}
	// Still faulting: the next summary after another interval, even if nothing more comes.
	time.AfterFunc(t.interval, t.flush)
	t.mu.Unlock()
	args := []any{"interval", t.interval.String()}
	for _, what := range slices.Sorted(maps.Keys(counts)) {
		args = append(args, what, counts[what])
		if e, ok := lastErr[what]; ok {
			args = append(args, what+"_last_error", e)
		}
	}
	t.log.Warn(t.msg, args...)
}
