package builds

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"sync"
)

// recent is a map by build id bounded without a clock: two generations, and when the
// current one is full it becomes the previous one and the oldest is dropped. What it holds
// about builds that ended elsewhere (another replica, a sweeper) ages out this way, so a
// replica that runs for months does not grow with every build it ever saw.
type recent[V any] struct {
	mu        sync.Mutex
	cur, prev map[int64]V
	max       int
}

func newRecent[V any](max int) *recent[V] {
	return &recent[V]{cur: make(map[int64]V), max: max}
}

func (r *recent[V]) get(id int64) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.cur[id]
	if !ok {
		v, ok = r.prev[id]
	}
	return v, ok
}

func (r *recent[V]) put(id int64, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[id]; !ok && len(r.cur) >= r.max {
		r.prev, r.cur = r.cur, make(map[int64]V, r.max)
	}
	r.cur[id] = v
}

func (r *recent[V]) forget(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cur, id)
	delete(r.prev, id)
}

// jobCache remembers, on this replica, what a trace PATCH needs of a build on a runner: the
// hash of its job token and the values to mask. A build's token hash and variables never
// change once it is assigned (a retry is a new build), so an entry cannot go stale; only
// the build's state can, and the append's compare-and-set checks that in Postgres. With it a
// PATCH is one statement instead of a read and a write. A miss only costs the read.
type jobCache struct{ r *recent[*cachedJob] }

type cachedJob struct {
	tokenHash [sha256.Size]byte
	vars      []Variable // masked ones only
}

func newJobCache(max int) *jobCache { return &jobCache{r: newRecent[*cachedJob](max)} }

// put records build b, assigned with the token whose hash is tokenHash; extra are more
// values to mask (its project's masked variables).
func (c *jobCache) put(b Build, tokenHash []byte, extra []Variable) {
	if len(tokenHash) != sha256.Size {
		return
	}
	e := &cachedJob{}
	copy(e.tokenHash[:], tokenHash)
	for _, v := range slices.Concat(extra, b.Payload.Variables) {
		if v.Masked && len(v.Value) >= MinMaskedLength {
			e.vars = append(e.vars, v)
		}
	}
	c.r.put(b.ID, e)
}

// get returns the entry of build id if the presented token is its token.
func (c *jobCache) get(id int64, token string) (*cachedJob, bool) {
	e, ok := c.r.get(id)
	if !ok || token == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(h[:], e.tokenHash[:]) != 1 {
		return nil, false
	}
	return e, true
}

// check reports whether build id is known here and, if so, whether token is its token.
func (c *jobCache) check(id int64, token string) (known, match bool) {
	e, ok := c.r.get(id)
	if !ok {
		return false, false
	}
	h := sha256.Sum256([]byte(token))
	return true, token != "" && subtle.ConstantTimeCompare(h[:], e.tokenHash[:]) == 1
}

// known reports whether build id is in the cache, whatever its token.
func (c *jobCache) known(id int64) bool {
	_, ok := c.r.get(id)
	return ok
}

func (c *jobCache) forget(id int64) { c.r.forget(id) }
