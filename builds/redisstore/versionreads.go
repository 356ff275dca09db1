package redisstore

import (
	"context"
	"sync"
)

// versionReads coalesces concurrent reads of the queue version into one Redis call at a
// time per Store (per replica).
//
// Every job request reads the version, and a fleet's requests come together: when 10,000
// long-polled runners asked again within a few seconds (jobapi-bench memory), 10,000 GETs
// queued for the client's pool of 10 × GOMAXPROCS connections (20 on two cores), up to
// 1,756 callers waited for a connection, and 13,592 reads failed at the call's 500 ms
// deadline while Redis itself was idle. A request that cannot read the version takes the
// fallback path (builds/claimpacing/fallback.go), so a healthy Redis had 88% of the fleet held
// by the fallback instead of the long poll, each request costing Postgres and memory the
// long poll does not. One GET answers every caller that is waiting, however many.
//
// A caller never takes an answer read before it came: it waits for the read that starts
// after the one in flight, as its own GET would have. So a request still sees every bump
// made before it arrived, a version is never older than with a GET of its own, and a
// read that failed decides nothing for a caller that came after it started (a slow or
// down Redis still sends each request to the fallback by a read of its own time,
// docs/overload.md). What it costs: a caller that comes while a read is in flight waits
// for the rest of that read and then its own, at most two round trips (two call timeouts
// when Redis does not answer). A caller that finds no read in flight, as the spread-out
// polls of an idle fleet do, reads in its own goroutine with its own context: no
// hand-off, nothing added to an idle poll.
type versionReads struct {
	read func(context.Context) (string, error)

	mu      sync.Mutex
	running bool         // a read is in flight
	next    *versionRead // the read that starts when it ends, for the callers that came meanwhile
}

// versionRead is one shared read; done is closed once v and err are set.
type versionRead struct {
	done chan struct{}
	v    string
	err  error
}

// get returns the version read by a call that started after get was called.
func (r *versionReads) get(ctx context.Context) (string, error) {
	r.mu.Lock()
	if !r.running {
		r.running = true
		r.mu.Unlock()
		v, err := r.read(ctx)
		r.finished()
		return v, err
	}
	if r.next == nil {
		r.next = &versionRead{done: make(chan struct{})}
	}
	next := r.next
	r.mu.Unlock()
	select {
	case <-next.done:
		return next.v, next.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// finished ends the read in flight and starts the next one if callers wait for it. The
// shared read does not run on any caller's context: a caller that goes away (its runner
// disconnected) must not fail the others' read. read bounds it (CallTimeout).
func (r *versionReads) finished() {
	r.mu.Lock()
	next := r.next
	r.next = nil
	r.running = next != nil
	r.mu.Unlock()
	if next == nil {
		return
	}
	go func() {
		next.v, next.err = r.read(context.Background())
		close(next.done)
		r.finished()
	}()
}
