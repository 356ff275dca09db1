package artifacts

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/junit"
)

// Bounds of reading JUnit reports on a replica: how many are parsed at once, how long a
// request waits for its turn, and how many bytes of parsed reports are kept.
const (
	junitParses    = 2
	junitParseWait = 10 * time.Second
	junitCacheSize = 64 << 20
)

// junitReports keeps the outcome of parsing each JUnit artifact of this replica (its cases,
// or why it cannot be read) and bounds how many are parsed at once. An artifact never
// changes once stored (an upload writes a fresh object key, a deletion removes the row that
// names it), so an outcome keyed by the object key holds on every replica for good; each
// replica parses a report at most once while it stays in its cache, however often its pages
// are viewed. An object store that fails is not an outcome, and is not kept.
type junitReports struct {
	slots chan struct{}
	wait  time.Duration

	mu    sync.Mutex
	max   int64 // the estimated bytes the cache may hold
	size  int64
	order *list.List               // of *parsedReport, the most recently used first
	byKey map[string]*list.Element // by object key
	// parsing: the keys being parsed, each closed when its parse ended.
	parsing map[string]chan struct{}
}

type parsedReport struct {
	key   string
	cases []junit.Case
	err   error // why the report cannot be read (nil: cases)
	size  int64
}

func newJUnitReports(parses int, wait time.Duration, maxBytes int64) *junitReports {
	return &junitReports{slots: make(chan struct{}, parses), wait: wait, max: maxBytes,
		order: list.New(), byKey: map[string]*list.Element{}, parsing: map[string]chan struct{}{}}
}

// put keeps an outcome, dropping the least recently used ones past the budget; one larger
// than the whole budget is not kept.
func (c *junitReports) put(p *parsedReport) {
	p.size = reportSize(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[p.key]; ok || p.size > c.max {
		return
	}
	c.byKey[p.key] = c.order.PushFront(p)
	c.size += p.size
	for c.size > c.max {
		last := c.order.Back()
		old := last.Value.(*parsedReport)
		c.order.Remove(last)
		delete(c.byKey, old.key)
		c.size -= old.size
	}
}

// read returns the outcome of key: the kept one, or the one parse gives, run in one of the
// parse slots and kept. A read of a key another read is parsing waits for that one. Waits
// last at most c.wait in all, and as long as ctx: builds.ErrUnavailable (a 503 with Retry-After)
// when no slot came free in time. An error of parse (the store failing) is returned and not
// kept.
func (c *junitReports) read(ctx context.Context, key string, parse func() (*parsedReport, error)) (*parsedReport, error) {
	deadline := time.NewTimer(c.wait)
	defer deadline.Stop()
	busy := func() error {
		return fmt.Errorf("%w: every test report parse slot stayed busy for %v", builds.ErrUnavailable, c.wait)
	}
	for {
		c.mu.Lock()
		if e, ok := c.byKey[key]; ok {
			c.order.MoveToFront(e)
			c.mu.Unlock()
			return e.Value.(*parsedReport), nil
		}
		running, ok := c.parsing[key]
		if !ok {
			break // with c.mu held
		}
		c.mu.Unlock()
		select {
		case <-running: // parsed (look again), or failed (parse it here)
		case <-deadline.C:
			return nil, busy()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	done := make(chan struct{})
	c.parsing[key] = done
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.parsing, key)
		c.mu.Unlock()
		close(done)
	}()
	select {
	case c.slots <- struct{}{}:
	case <-deadline.C:
		return nil, busy()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p, err := parse()
	<-c.slots
	if err != nil {
		return nil, err
	}
	c.put(p)
	return p, nil
}

// reportSize estimates the memory an outcome holds.
func reportSize(p *parsedReport) int64 {
	n := int64(unsafe.Sizeof(*p)) + int64(len(p.key)) + 64
	for _, c := range p.cases {
		n += int64(unsafe.Sizeof(c)) + int64(len(c.Name)+len(c.Classname)+len(c.File)+len(c.SystemOutput)+len(c.StackTrace))
	}
	if p.err != nil {
		n += int64(len(p.err.Error()))
	}
	return n
}
