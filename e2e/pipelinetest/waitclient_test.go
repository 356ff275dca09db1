package pipelinetest_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/operatorclient"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestWaitClientAcrossReplicaRestart: `jobapi wait`'s loop (operatorclient.WaitPipeline)
// talks to a load balancer; the replica behind it stops, the balancer answers 502 for a
// while, then a new replica on the same database takes over. The loop rides it out and
// reports the final result.
func TestWaitClientAcrossReplicaRestart(t *testing.T) {
	t.Parallel()
	a := jobapitest.Start(t, jobapitest.Options{})
	lb := jobapitest.NewSwitchProxy(t, a.URL)
	_, token := a.CreateRunner(t)
	r := jobapitest.NewRunner(t, lb.URL, token, "s_waitclient")
	p := createPipeline(t, a, 60, "", []string{"build", "test"},
		job{"name": "b1", "stage": "build", "script": "x"},
		job{"name": "b2", "stage": "build", "script": "x"},
		job{"name": "t1", "stage": "test", "script": "x"})

	type answer struct {
		at time.Time
		p  operatorclient.Progress
	}
	var mu sync.Mutex
	var answers []answer
	done := make(chan struct{})
	var final operatorclient.Progress
	var waitErr error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		defer close(done)
		oc := operatorclient.New(lb.URL, jobapitest.AdminToken)
		final, waitErr = oc.WaitPipeline(ctx, p.ProjectID, p.ID, operatorclient.WaitOptions{
			PerCall: time.Second, MaxBackoff: 200 * time.Millisecond,
			OnProgress: func(pr operatorclient.Progress) {
				mu.Lock()
				answers = append(answers, answer{time.Now(), pr})
				mu.Unlock()
			}})
	}()

	b1 := r.TakeNamed(t, "b1")
	r.Finish(t, b1, runnerclient.StateSuccess, "")
	b2 := r.TakeNamed(t, "b2")
	// Wait for an answer that saw b1 finished, then stop the replica.
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		n := len(answers)
		seen := n > 0 && slices.Contains(answers[n-1].p.Finished, b1.ID)
		mu.Unlock()
		if seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no wait answer with b1 finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("stop replica a: %v", err)
	}
	stopped := time.Now()
	for deadline := time.Now().Add(10 * time.Second); lb.Errors() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the wait loop did not call the stopped replica (%d proxy errors)", lb.Errors())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("WaitPipeline gave up while no replica was up: %+v, %v", final, waitErr)
	default:
	}
	// The runner's final update fails too (502): it retries once the new replica is up.
	if u, err := r.UpdateJob(t.Context(), b2, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil || u.Code != http.StatusBadGateway {
		t.Fatalf("final update with no replica: %d, %v", u.Code, err)
	}
	b := a.Replica(t, jobapitest.Options{})
	lb.Point(t, b.URL)
	restarted := time.Now()
	r.Finish(t, b2, runnerclient.StateSuccess, "")
	t1 := r.TakeNamed(t, "t1")
	r.Finish(t, t1, runnerclient.StateSuccess, "")
	<-done
	if waitErr != nil {
		t.Fatalf("WaitPipeline: %v", waitErr)
	}
	if final.Status != "success" || final.JobsRemaining != 0 || !slices.Equal(final.Finished, []int64{b1.ID, b2.ID, t1.ID}) {
		t.Errorf("final: %+v", final)
	}
	checkWaitAnswer(t, b, p.ID, api.PipelineWait{Status: final.Status, JobsRemaining: final.JobsRemaining, Finished: final.Finished})
	mu.Lock()
	defer mu.Unlock()
	before, after := 0, 0
	for _, an := range answers {
		switch {
		case an.at.Before(stopped):
			before++
		case an.at.After(restarted):
			after++
		default:
			t.Errorf("an answer arrived while no replica was up: %+v", an.p)
		}
	}
	t.Logf("replica down %v; %d proxy errors; %d answers before, %d after", restarted.Sub(stopped).Round(time.Millisecond), lb.Errors(), before, after)
	if before == 0 || after == 0 {
		t.Errorf("answers: %d before the stop, %d after the restart", before, after)
	}
}

// TestWaitClientShortPerCall: a per-call wait under a second must still hold each request
// on the server (the endpoint counts whole seconds), not turn the loop into a busy poll.
func TestWaitClientShortPerCall(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	lb := jobapitest.NewSwitchProxy(t, inst.URL)
	p := createPipeline(t, inst, 61, "", []string{"build"}, job{"name": "a", "stage": "build", "script": "x"})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	last, err := operatorclient.New(lb.URL, jobapitest.AdminToken).WaitPipeline(ctx, p.ProjectID, p.ID,
		operatorclient.WaitOptions{PerCall: 300 * time.Millisecond})
	if err == nil || last.JobsRemaining != 1 {
		t.Fatalf("WaitPipeline on an unfinished pipeline: %+v, %v", last, err)
	}
	if n := lb.Calls(); n > 3 {
		t.Errorf("%d wait requests in 1.5 s with PerCall 300ms: the loop polls without waiting", n)
	}
}
