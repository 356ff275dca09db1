package pgflags

import (
	"hash/crc32"
	"maps"
	"strconv"
	"time"

	"github.com/open-feature/go-sdk/openfeature"

	"github.com/jobapi/jobapi/featureflags"
)

// flag is a flagRow shaped for evaluation: actor lookups are map hits.
type flag struct {
	on, disabled bool
	actors       map[string]struct{}
	percentage   int // 0: no percentage gate
}

// snapshot is every flag as one load saw them. It is never modified once published.
type snapshot struct {
	loadedAt time.Time // when the load started: the data is at least this fresh
	flags    map[string]flag
}

func newSnapshot(loadedAt time.Time, rows []flagRow) *snapshot {
	s := &snapshot{loadedAt: loadedAt, flags: make(map[string]flag, len(rows))}
	for _, r := range rows {
		f := flag{on: r.on(), disabled: r.disabled(), percentage: r.percentage(),
			actors: make(map[string]struct{}, len(r.Actors))}
		for _, a := range r.Actors {
			f.actors[a] = struct{}{}
		}
		s.flags[r.Name] = f
	}
	return s
}

func (f flag) equal(g flag) bool {
	return f.on == g.on && f.disabled == g.disabled && f.percentage == g.percentage &&
		maps.Equal(f.actors, g.actors)
}

// changedFlags names the flags that differ between two snapshots, for config-change events.
func changedFlags(old, cur *snapshot) []string {
	var changed []string
	for name, f := range cur.flags {
		if g, ok := old.flags[name]; !ok || !f.equal(g) {
			changed = append(changed, name)
		}
	}
	for name := range old.flags {
		if _, ok := cur.flags[name]; !ok {
			changed = append(changed, name)
		}
	}
	return changed
}

// evaluate applies the gates in Flipper's order. The reason tells operators which gate
// decided: STATIC boolean (or no gate at all), DISABLED kill switch, TARGETING_MATCH actor,
// SPLIT percentage, DEFAULT targeting gates none of which held. STATIC and DISABLED mean
// that the context played no part, so that the answer holds for every context:
// featureflags.Flags relies on it to decide two-phase commit before the claim knows the
// build's project.
func (f flag) evaluate(name string, flatCtx openfeature.FlattenedContext) (bool, openfeature.Reason) {
	switch {
	case f.on:
		return true, openfeature.StaticReason
	case f.disabled:
		return false, openfeature.DisabledReason
	case len(f.actors) == 0 && f.percentage == 0:
		// No gate is set (the last actor removed, the percentage set to 0): off with no
		// dynamic evaluation, not a targeting that matched nothing.
		return false, openfeature.StaticReason
	}
	project := attr(flatCtx, openfeature.TargetingKey)
	if project != "" {
		if _, ok := f.actors["project:"+project]; ok {
			return true, openfeature.TargetingMatchReason
		}
	}
	if runner := attr(flatCtx, featureflags.AttrRunnerID); runner != "" {
		if _, ok := f.actors["runner:"+runner]; ok {
			return true, openfeature.TargetingMatchReason
		}
	}
	if f.percentage > 0 && project != "" {
		return inPercentage(name, project, f.percentage), openfeature.SplitReason
	}
	return false, openfeature.DefaultReason
}

// inPercentage is Flipper's percentage_of_actors gate, so a rollout moved between Flipper and
// jobapi keeps the same actors on: the flag name salts the hash, so each flag picks its own
// actors, and one actor's answer never changes while the percentage only grows.
func inPercentage(name, actorID string, pct int) bool {
	const scale = 1000 // Flipper's SCALING_FACTOR: allows fractional percentages there
	return crc32.ChecksumIEEE([]byte(name+actorID))%(100*scale) < uint32(pct*scale)
}

// attr reads a string attribute; callers of the SDK other than featureflags.Flags may pass
// ids as numbers.
func attr(flatCtx openfeature.FlattenedContext, key string) string {
	switch v := flatCtx[key].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	}
	return ""
}
