package builds

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"

	"github.com/jobapi/jobapi/builds/recent"
)

// jobCache remembers, on this replica, what a trace PATCH needs of a build on a runner: the
// hash of its job token and the values to mask. A build's token hash and variables never
// change once it is assigned (a retry is a new build), so an entry cannot go stale; only
// the build's state can, and the append's compare-and-set checks that in Postgres. With it a
// PATCH is one statement instead of a read and a write. A miss only costs the read.
type jobCache struct{ r *recent.Map[*cachedJob] }

type cachedJob struct {
	tokenHash [sha256.Size]byte
	vars      []Variable // masked ones only
}

func newJobCache(max int) *jobCache { return &jobCache{r: recent.New[*cachedJob](max)} }

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
	c.r.Put(b.ID, e)
}

// get returns the entry of build id if the presented token is its token.
func (c *jobCache) get(id int64, token string) (*cachedJob, bool) {
	e, ok := c.r.Get(id)
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
	e, ok := c.r.Get(id)
	if !ok {
		return false, false
	}
	h := sha256.Sum256([]byte(token))
	return true, token != "" && subtle.ConstantTimeCompare(h[:], e.tokenHash[:]) == 1
}

// known reports whether build id is in the cache, whatever its token.
func (c *jobCache) known(id int64) bool {
	_, ok := c.r.Get(id)
	return ok
}

func (c *jobCache) forget(id int64) { c.r.Forget(id) }
