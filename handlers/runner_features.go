// Runner protocol: the info.features object gitlab-runner sends with every POST
// /jobs/request, which takes the runner's token.

package handlers

import (
	"encoding/json"
	"sync"
)

// featureSets parses the info.features object of job requests, remembering the objects it
// has seen. A runner sends the same ~30 flags on every poll, and building a map of them
// was a fifth of an idle poll's CPU; the same bytes always parse to the same result, so a
// repeat costs a map lookup. The cache is bounded by clearing it when full: a fleet has
// few distinct feature sets (one per runner version and executor).
type featureSets struct {
	mu   sync.Mutex
	seen map[string]parsedFeatures
}

type parsedFeatures struct {
	all      map[string]bool // shared between requests: read only
	twoPhase bool
}

const maxFeatureSets = 256

// parse validates raw (absent, null, or an object of booleans) and returns it parsed.
func (c *featureSets) parse(raw json.RawMessage) (parsedFeatures, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return parsedFeatures{}, nil
	}
	c.mu.Lock()
	p, ok := c.seen[string(raw)]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p.all); err != nil {
		return parsedFeatures{}, badRequest("field \"info.features\" must be an object of booleans")
	}
	p.twoPhase = p.all["two_phase_job_commit"]
	c.mu.Lock()
	if c.seen == nil || len(c.seen) >= maxFeatureSets {
		c.seen = make(map[string]parsedFeatures)
	}
	c.seen[string(raw)] = p
	c.mu.Unlock()
	return p, nil
}
