package polltest_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// heldOnGoroutines counts this process's goroutines that hold a job request in the long
// poll's hub on their own stack (Hub.Wait): a parked request has none.
func heldOnGoroutines() int {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "builds/longpoll.(*Hub).Wait(")
}

// TestHeldRequestsHoldNoGoroutine: a replica holds 60 runners' requests without a
// goroutine each (httppark: their connections left net/http), and a job still reaches one
// of them, the others held on; the runners' connections are the ones they came on.
func TestHeldRequestsHoldNoGoroutine(t *testing.T) {
	t.Parallel()
	const n = 60
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pollers []*jobapitest.Poller
	for i := range n {
		_, token := inst.CreateRunner(t, "parked")
		r := jobapitest.NewRunner(t, held.URL, token, fmt.Sprintf("s_park%d", i))
		r.NoJob(t)
		pollers = append(pollers, jobapitest.StartPoller(t, ctx, r))
	}
	held.WaitHeld(t, n)
	if g := heldOnGoroutines(); g != 0 {
		t.Fatalf("%d of the %d held requests wait on a goroutine of their own: not parked", g, n)
	}
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "parked", "stage": "test", "script": "x", "tags": []string{"parked"}})
	jobapitest.FirstHandout(t, ctx, pollers, p.Jobs[0].ID, "the job was not handed out to a parked runner")
	held.WaitHeld(t, n-1)
	for i, pl := range pollers {
		if k := pl.NoJobs.Load(); k != 0 {
			t.Errorf("runner %d was answered 204 %d times: woken for nothing", i, k)
		}
	}
}

// TestShutdownAnswersParkedRequests: a replica that shuts down answers the requests it
// holds at once, 204, instead of keeping them for their long poll (a minute here).
func TestShutdownAnswersParkedRequests(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	_, token := inst.CreateRunner(t, "leaving")
	r := jobapitest.NewRunner(t, held.URL, token, "s_leaving")
	r.NoJob(t)
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		_, res, err := r.RequestJob(context.Background())
		done <- result{res.Code, err}
	}()
	held.WaitHeld(t, 1)
	start := time.Now()
	if err := held.Close(); err != nil {
		t.Fatalf("replica close: %v", err)
	}
	select {
	case got := <-done:
		if got.err != nil || got.code != http.StatusNoContent {
			t.Fatalf("held request at shutdown: %d, %v; want 204", got.code, got.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not answered 10 s after its replica shut down")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("shutdown took %s with one request held", d)
	}
}
