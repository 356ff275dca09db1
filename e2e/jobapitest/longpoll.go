package jobapitest

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The long poll (JOBAPI_LONG_POLL, builds/longpoll) across replicas: jobs are created
// through one replica, the runners' requests are held by others, so every wake-up crosses
// Redis. The holds are long (a minute), so that a runner that gets its job in time was
// woken for it, not let go by the hold's end.

// LongPollHold is how long a LongPollReplica holds a request.
const LongPollHold = time.Minute

// LongPollReplica starts a replica of the instance with the long poll on.
func (i *Instance) LongPollReplica(t testing.TB) *Instance {
	t.Helper()
	// Replica starts with the instance's configuration: a copy's, with the long poll on.
	conf := *i
	conf.Config.LongPoll = LongPollHold
	return conf.Replica(t, Options{})
}

// Poller keeps asking for a job until it gets one (or ctx ends), counting the 204s.
type Poller struct {
	R      *Runner
	Got    chan int64 // the job's id
	NoJobs atomic.Int64
}

// StartPoller starts polling for r until ctx ends; an error or an answer other than a job
// or a 204 fails the test.
func StartPoller(t testing.TB, ctx context.Context, r *Runner) *Poller {
	p := &Poller{R: r, Got: make(chan int64, 1)}
	go func() {
		for ctx.Err() == nil {
			job, res, err := r.RequestJob(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				t.Errorf("request job: %v", err)
				return
			case job != nil:
				p.Got <- job.ID
				return
			case res.Code != http.StatusNoContent:
				t.Errorf("request job: %d %s", res.Code, res.Message)
				return
			}
			p.NoJobs.Add(1)
		}
	}()
	return p
}

// FirstHandout waits up to 20 s for any of pollers to be handed a job, which must be want;
// none at all fails the test with why.
func FirstHandout(t testing.TB, ctx context.Context, pollers []*Poller, want int64, why string) {
	t.Helper()
	got := make(chan int64, len(pollers))
	for _, pl := range pollers {
		go func() {
			select {
			case id := <-pl.Got:
				got <- id
			case <-ctx.Done():
			}
		}()
	}
	select {
	case id := <-got:
		if id != want {
			t.Fatalf("got job %d, want %d", id, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal(why)
	}
}

// WaitHeld waits until the replica holds n requests.
func (i *Instance) WaitHeld(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i.Service.LongPollWaiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the replica holds %d requests, want %d", i.Service.LongPollWaiters(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
