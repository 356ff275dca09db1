package builds

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync"
)

// jobCache remembers, on this replica, what a trace PATCH needs of a build on a runner: the
// hash of its job token and the values to mask. A build's token hash and variables never
// change once it is assigned (a retry is a new build), so an entry cannot go stale; only
// the build's state can, and the append's compare-and-set checks that in Postgres. With it a
// PATCH is one statement instead of a read and a write.
//
// Two generations bound memory without a clock: when the current map is full it becomes the
// previous one and the oldest generation is dropped. A miss only costs the read.
type jobCache struct {
	mu        sync.Mutex
	cur, prev map[int64]*cachedJob
	max       int
}

type cachedJob struct {
	tokenHash [sha256.Size]byte
	vars      []Variable // masked ones only
}

func newJobCache(max int) *jobCache {
	return &jobCache{cur: make(map[int64]*cachedJob), max: max}
}

// put records build b, assigned with the token whose hash is tokenHash.
func (c *jobCache) put(b Build, tokenHash []byte) {
	if len(tokenHash) != sha256.Size {
		return
	}
	e := &cachedJob{}
	copy(e.tokenHash[:], tokenHash)
	for _, v := range b.Payload.Variables {
		if v.Masked && len(v.Value) >= minMaskedLength {
			e.vars = append(e.vars, v)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.max {
		c.prev, c.cur = c.cur, make(map[int64]*cachedJob, c.max)
	}
	c.cur[b.ID] = e
}

// get returns the entry of build id if the presented token is its token.
func (c *jobCache) get(id int64, token string) (*cachedJob, bool) {
	c.mu.Lock()
	e, ok := c.cur[id]
	if !ok {
		e, ok = c.prev[id]
	}
	c.mu.Unlock()
	if !ok || token == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(h[:], e.tokenHash[:]) != 1 {
		return nil, false
	}
	return e, true
}

func (c *jobCache) forget(id int64) {
	c.mu.Lock()
	delete(c.cur, id)
	delete(c.prev, id)
	c.mu.Unlock()
}
