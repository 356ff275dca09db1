package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/testenv"
)

// TestQueueFeed: every bump, Bump's and a runner's, is announced with the version it set,
// a runner change naming the runner; the subscription ends when its context does.
func TestQueueFeed(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := redisstore.New(rdb, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type bump struct {
		version string
		runner  int64
	}
	got := make(chan bump, 4)
	ready := make(chan struct{})
	done := make(chan error, 1)
	sub, stop := context.WithCancel(ctx)
	go func() {
		done <- s.SubscribeQueue(sub, func() { close(ready) }, func(v string, runner int64) { got <- bump{v, runner} })
	}()
	<-ready
	for _, runner := range []int64{0, 42} {
		var err error
		if runner == 0 {
			err = s.Bump(ctx)
		} else {
			err = s.BumpAnnounced(ctx, runner)
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-got:
			if b.version != v || b.runner != runner {
				t.Errorf("announced %+v, want version %s runner %d", b, v, runner)
			}
		case <-ctx.Done():
			t.Fatal("no announcement")
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("subscription ended with %v, want nil when its context ends", err)
	}
}
