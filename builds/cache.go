package builds

import (
	"sync"
	"time"
)

// runnerCache keeps recently authenticated runners and known managers in memory, so that a
// fleet polling every few seconds costs no Postgres query per idle poll. Entries live for a
// short TTL; a runner update on this replica forgets its entry at once.
type runnerCache struct {
	ttl      time.Duration
	mu       sync.Mutex
	byHash   map[string]cachedRunner
	managers map[managerKey]cachedManager
}

type cachedRunner struct {
	runner Runner
	at     time.Time
}

type managerKey struct {
	runnerID int64
	systemID string
}

type cachedManager struct {
	id int64
	at time.Time
}

// idleAuthTTL bounds how long an idle poll (the runner echoes the current queue version) is
// answered from a cached runner. Any change to a runner bumps the queue version, which sends
// the runner's next poll down the full path with a fresh lookup; this bound only limits how
// long a token that vanished some other way could still get 204 instead of 403.
const idleAuthTTL = 10 * time.Minute

// managerRefresh is how often a manager's contacted_at and info are written per replica.
const managerRefresh = time.Minute

// maxCacheEntries bounds memory if many distinct tokens are presented.
const maxCacheEntries = 100_000

func newRunnerCache(ttl time.Duration) *runnerCache {
	return &runnerCache{ttl: ttl, byHash: map[string]cachedRunner{}, managers: map[managerKey]cachedManager{}}
}

// get returns the cached runner of a token hash if it was loaded at most the cache's TTL ago,
// or idleAuthTTL ago for an idle poll.
func (c *runnerCache) get(hash []byte, now time.Time, idle bool) (Runner, bool) {
	maxAge := c.ttl
	if idle {
		maxAge = max(maxAge, idleAuthTTL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byHash[string(hash)]
	if !ok || now.Sub(e.at) > maxAge {
		return Runner{}, false
	}
	return e.runner, true
}

func (c *runnerCache) put(hash []byte, r Runner, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byHash) >= maxCacheEntries {
		clear(c.byHash)
	}
	c.byHash[string(hash)] = cachedRunner{runner: r, at: now}
}

func (c *runnerCache) forgetRunner(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.byHash {
		if e.runner.ID == id {
			delete(c.byHash, k)
		}
	}
}

func (c *runnerCache) forgetManager(runnerID int64, systemID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.managers, managerKey{runnerID, systemID})
}

func (c *runnerCache) manager(runnerID int64, systemID string, now time.Time) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.managers[managerKey{runnerID, systemID}]
	if !ok || now.Sub(e.at) > managerRefresh {
		return 0, false
	}
	return e.id, true
}

func (c *runnerCache) putManager(runnerID int64, systemID string, id int64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.managers) >= maxCacheEntries {
		clear(c.managers)
	}
	c.managers[managerKey{runnerID, systemID}] = cachedManager{id: id, at: now}
}
