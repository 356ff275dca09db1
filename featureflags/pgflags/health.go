package pgflags

import (
	"time"

	"github.com/open-feature/go-sdk/openfeature"
)

// noteLoad tracks the snapshot's health after a load and reports transitions only: one log
// line and one event per change of state, however long Postgres stays away. Call with p.mu.
func (p *Provider) noteLoad(old, cur *snapshot, err error) {
	log := p.opts.Logger
	if err == nil {
		switch {
		case p.health != openfeature.ReadyState:
			if p.failures > 0 {
				log.Info("feature flags reloaded from Postgres", "failed_loads", p.failures)
			}
			p.health = openfeature.ReadyState
			p.emit(openfeature.ProviderReady, "feature flags loaded", nil)
		case old != nil:
			if changed := changedFlags(old, cur); len(changed) > 0 {
				p.emit(openfeature.ProviderConfigChange, "feature flags changed", changed)
			}
		}
		p.failures = 0
		return
	}

	p.failures++
	stale := old == nil || time.Since(old.loadedAt) > p.opts.Staleness
	switch {
	case stale && p.health != openfeature.ErrorState:
		log.Warn("feature flags unavailable: evaluations return defaults until Postgres answers",
			"error", err, "failed_loads", p.failures)
		p.health = openfeature.ErrorState
		p.emit(openfeature.ProviderError, "feature flags older than the staleness limit", nil)
	case !stale && p.health == openfeature.ReadyState:
		log.Warn("feature flag reload failed; serving the last snapshot until it is too old",
			"error", err, "staleness_limit", p.opts.Staleness)
		p.health = openfeature.StaleState
		p.emit(openfeature.ProviderStale, "feature flag reload failed", nil)
	}
}

// emit never blocks: a load must not wait on an SDK that is not listening (a Provider used
// without registration, as in tests).
func (p *Provider) emit(t openfeature.EventType, msg string, changed []string) {
	ev := openfeature.Event{
		ProviderName: p.Metadata().Name,
		EventType:    t,
		ProviderEventDetails: openfeature.ProviderEventDetails{
			Message:     msg,
			FlagChanges: changed,
		},
	}
	select {
	case p.events <- ev:
	default:
	}
}
