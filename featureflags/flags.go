// Package featureflags holds jobapi's flag keys and the typed getters the rest of the code
// calls. Flags are evaluated only through the OpenFeature SDK, so the provider (Postgres by
// default, see package pgflags; flagd or a file otherwise) is a wiring choice in cmd/jobapi.
//
// A getter never fails: when the provider cannot answer, the flag's default (off) applies,
// a warning is logged (at most once a minute) and a fallback is counted, because a job
// request must not wait for, or fail on, the flag system.
package featureflags

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
)

// warnEvery bounds fallback warnings: every job request evaluates flags, so an outage would
// otherwise write one line per request.
const warnEvery = time.Minute

// Flags evaluates jobapi's flags through an OpenFeature client. Safe for concurrent use.
type Flags struct {
	client *openfeature.Client
	logger *slog.Logger
	counts map[string]*counters // fixed at New: one entry per Keys, so reads need no lock

	lastWarn   atomic.Int64  // unix nanos of the last fallback warning
	suppressed atomic.Uint64 // fallbacks not logged since the last warning
}

type counters struct {
	on, off, fallbacks atomic.Uint64
}

// Counts are the outcomes of one flag's evaluations since New. A fallback is also counted as
// off, the value it returned.
type Counts struct {
	On, Off, Fallbacks uint64
}

// New returns getters evaluating through client. A nil logger means slog.Default().
func New(client *openfeature.Client, logger *slog.Logger) *Flags {
	if logger == nil {
		logger = slog.Default()
	}
	f := &Flags{client: client, logger: logger, counts: make(map[string]*counters, len(Keys))}
	for _, k := range Keys {
		f.counts[k] = &counters{}
	}
	return f
}

// TwoPhaseCommit reports whether allow_runner_job_acknowledgement is on for a build of
// projectID assigned to runnerID's manager systemID. Evaluate it once, at assignment, and
// record the outcome on the build: re-evaluating later lets replicas disagree mid-rollout.
func (f *Flags) TwoPhaseCommit(ctx context.Context, projectID, runnerID int64, systemID string) bool {
	evalCtx := openfeature.NewEvaluationContext(strconv.FormatInt(projectID, 10), map[string]any{
		AttrRunnerID:              strconv.FormatInt(runnerID, 10),
		AttrRunnerManagerSystemID: systemID,
	})
	return f.boolean(ctx, AllowRunnerJobAcknowledgement, evalCtx)
}

// TwoPhaseCommitAnyProject evaluates allow_runner_job_acknowledgement for runnerID's
// manager systemID before a claim knows its build, without a project. anyProject reports
// that the answer holds for a build of every project: the provider resolved the flag
// without looking at the context (reason STATIC or DISABLED, or no such flag). A claim can
// then pass the decision as a parameter and be one statement, instead of locking a
// candidate and asking TwoPhaseCommit for its project in between. Otherwise (targeting, a
// percentage, a provider failure) the caller asks TwoPhaseCommit per candidate as before,
// which counts and logs a failure there.
//
// It counts nothing, so that the counts stay one per build decided: the caller that
// assigns a build on its strength calls CountTwoPhaseCommit with it.
func (f *Flags) TwoPhaseCommitAnyProject(ctx context.Context, runnerID int64, systemID string) (on, anyProject bool) {
	evalCtx := openfeature.NewEvaluationContext("", map[string]any{
		AttrRunnerID:              strconv.FormatInt(runnerID, 10),
		AttrRunnerManagerSystemID: systemID,
	})
	d, err := f.client.BooleanValueDetails(ctx, AllowRunnerJobAcknowledgement, false, evalCtx)
	switch {
	case d.ErrorCode == openfeature.FlagNotFoundCode:
		return false, true // a flag nobody set is off for everyone (see boolean)
	case err != nil || d.ErrorCode != "":
		return false, false
	case d.Reason == openfeature.StaticReason, d.Reason == openfeature.DisabledReason:
		return d.Value, true
	}
	return false, false
}

// CountTwoPhaseCommit counts an evaluation of allow_runner_job_acknowledgement that
// TwoPhaseCommitAnyProject answered for a build.
func (f *Flags) CountTwoPhaseCommit(on bool) {
	c := f.counts[AllowRunnerJobAcknowledgement]
	if on {
		c.on.Add(1)
	} else {
		c.off.Add(1)
	}
}

// Fallbacks is the number of evaluations, all flags together, that returned the default
// because the provider failed.
func (f *Flags) Fallbacks() uint64 {
	var n uint64
	for _, c := range f.counts {
		n += c.fallbacks.Load()
	}
	return n
}

// Counts returns the outcomes for flag (zero for a key not in Keys). Metrics read it: export
// as flag_evaluations_total{flag,result="on"|"off"} and flag_fallbacks_total{flag}.
func (f *Flags) Counts(flag string) Counts {
	c, ok := f.counts[flag]
	if !ok {
		return Counts{}
	}
	return Counts{On: c.on.Load(), Off: c.off.Load(), Fallbacks: c.fallbacks.Load()}
}

// boolean evaluates key with default false. FLAG_NOT_FOUND is not a fallback: a flag nobody
// ever set is simply off, and counting it would make the metric useless for alerting.
func (f *Flags) boolean(ctx context.Context, key string, evalCtx openfeature.EvaluationContext) bool {
	c, ok := f.counts[key]
	if !ok {
		c = &counters{} // a key missing from Keys: evaluate anyway, only its metrics are lost
	}
	d, err := f.client.BooleanValueDetails(ctx, key, false, evalCtx)
	if (err != nil || d.ErrorCode != "") && d.ErrorCode != openfeature.FlagNotFoundCode {
		c.fallbacks.Add(1)
		c.off.Add(1)
		f.warnFallback(key, d, err)
		return false
	}
	if d.Value {
		c.on.Add(1)
	} else {
		c.off.Add(1)
	}
	return d.Value
}

func (f *Flags) warnFallback(key string, d openfeature.BooleanEvaluationDetails, err error) {
	now := time.Now().UnixNano()
	last := f.lastWarn.Load()
	if now-last < int64(warnEvery) || !f.lastWarn.CompareAndSwap(last, now) {
		f.suppressed.Add(1)
		return
	}
	f.logger.Warn("feature flag evaluation failed; using the default (off)",
		"flag", key,
		"error_code", string(d.ErrorCode),
		"error", err,
		"suppressed_since_last_warning", f.suppressed.Swap(0))
}
