// Package recent is a map by id bounded without a clock: two generations, and when the
// current one is full it becomes the previous one and the oldest is dropped. What a replica
// holds about builds that ended elsewhere (another replica, a sweeper) ages out this way, so
// a replica that runs for months does not grow with every build it ever saw.
package recent

import "sync"

// Map holds values by id for two generations of at most max entries each.
type Map[V any] struct {
	mu        sync.Mutex
	cur, prev map[int64]V
	max       int
}

// New returns an empty map whose generations hold max entries each.
func New[V any](max int) *Map[V] {
	return &Map[V]{cur: make(map[int64]V), max: max}
}

// Get returns id's value, from either generation.
func (r *Map[V]) Get(id int64) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.cur[id]
	if !ok {
		v, ok = r.prev[id]
	}
	return v, ok
}

// Put sets id's value in the current generation, which, when full and without id, becomes
// the previous one first.
func (r *Map[V]) Put(id int64, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[id]; !ok && len(r.cur) >= r.max {
		r.prev, r.cur = r.cur, make(map[int64]V, r.max)
	}
	r.cur[id] = v
}

// Forget drops id from both generations.
func (r *Map[V]) Forget(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cur, id)
	delete(r.prev, id)
}
