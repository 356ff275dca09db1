package jobapitest

import (
	"fmt"
	"sync"
	"time"
)

// Clock is a replica's clock that only the test moves (Options{Now: clock.Now}): time-driven
// behaviour (token expiry, reapers, delayed jobs) is tested by moving it and calling the
// workers' Once methods.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at start; a zero start is the real time in microseconds (as
// Postgres keeps them), so that the database's own now() defaults agree with it to within
// the test's runtime.
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = time.Now().UTC().Truncate(time.Microsecond)
	}
	return &Clock{now: start}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t. It never moves back: a test that asks for that has a bug, and
// Set panics.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		panic(fmt.Sprintf("test clock moved backwards: %s → %s", c.now, t))
	}
	c.now = t
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d < 0 {
		panic(fmt.Sprintf("test clock moved backwards by %s", -d))
	}
	c.now = c.now.Add(d)
}
