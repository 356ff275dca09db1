package pipelinetest_test

import (
	"context"
	"errors"
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
// on the server (the endpoint counts whole seconds), not turn the loop into a busy poll:
// every request the loop sends asks the server to hold it (timeout=1, never 0), and the
// loop asks again after each answer. The test stops the loop itself after its second
// answer instead of giving it a wall-clock budget: a budget of 1.5 s for two 1 s holds
// failed on a loaded machine before the first answer arrived.
func TestWaitClientShortPerCall(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	p := createPipeline(t, inst, 61, "", []string{"build"}, job{"name": "a", "stage": "build", "script": "x"})
	c := operatorclient.New(inst.URL, jobapitest.AdminToken)
	rec := &waitRecorder{next: http.DefaultTransport}
	c.HTTP = &http.Client{Transport: rec}
	// The deadline only stops a hung loop; the test ends on its second answer.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answers := 0
	last, err := c.WaitPipeline(ctx, p.ProjectID, p.ID, operatorclient.WaitOptions{PerCall: 300 * time.Millisecond,
		OnProgress: func(operatorclient.Progress) {
			if answers++; answers == 2 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || answers != 2 || last.JobsRemaining != 1 {
		t.Fatalf("WaitPipeline on an unfinished pipeline: %+v, %v after %d answers; want jobs_remaining 1 and the test's cancel after 2", last, err, answers)
	}
	timeouts := rec.timeouts()
	if len(timeouts) < 2 {
		t.Fatalf("wait requests answered: %v, want at least 2", timeouts)
	}
	for _, v := range timeouts {
		if v != "1" {
			t.Errorf("wait requests asked the server to hold them for %v seconds, want 1 each (PerCall 300ms rounded up): a 0 polls without waiting", timeouts)
			break
		}
	}
}

// waitRecorder records the timeout query of every wait request that got an answer.
type waitRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (w *waitRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(r)
	if err == nil {
		w.mu.Lock()
		w.seen = append(w.seen, r.URL.Query().Get("timeout"))
		w.mu.Unlock()
	}
	return resp, err
}

func (w *waitRecorder) timeouts() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}
