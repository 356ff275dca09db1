package pipelinetest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/operatorclient"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// TestWaitLatency: with Redis healthy, a parked waiter answers as soon as the last build
// finishes, well before its 2 s safety poll.
func TestWaitLatency(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	eventsSubscribed(t, inst, 1)
	var lats []time.Duration
	for i := range 5 {
		p := createPipeline(t, inst, 10, "", []string{"build", "test"},
			job{"name": "a", "stage": "build", "script": "x"},
			job{"name": "b", "stage": "test", "script": "x"})
		a := r.TakeNamed(t, "a")
		waited := make(chan waitCall, 1)
		go func() { waited <- callWait(inst.URL, p.ProjectID, p.ID, 30) }()
		r.Finish(t, a, runnerclient.StateSuccess, "")
		b := r.TakeNamed(t, "b")
		// Park the waiter: it has read the progress and sleeps until an event or its poll.
		select {
		case w := <-waited:
			t.Fatalf("round %d: waiter returned before the pipeline finished: %+v", i, w)
		case <-time.After(300 * time.Millisecond):
		}
		sent := time.Now()
		r.Finish(t, b, runnerclient.StateSuccess, "")
		w := <-waited
		if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 || len(w.res.Finished) != 2 {
			t.Fatalf("round %d: wait %+v, %v", i, w.res, w.err)
		}
		checkWaitAnswer(t, inst, p.ID, w.res)
		lats = append(lats, w.at.Sub(sent))
	}
	slices.Sort(lats)
	t.Logf("final update sent → wait answer: min %v, median %v, max %v (safety poll %v)", lats[0], lats[len(lats)/2], lats[len(lats)-1], 2*time.Second)
	// Without the event the waiter would answer at its 2 s poll, 1.7 s after the update, in
	// every round; the median tells that apart from one round the loaded machine slowed (a
	// clean-clone CI run saw max 1.01 s with median 290 ms).
	if median := lats[len(lats)/2]; median > time.Second {
		t.Errorf("median wake-up %v: events do not wake the waiter", median)
	}
}

// TestWaitTimeout: an unfinished pipeline answers at the timeout with what is left.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 11, "", []string{"build"},
		job{"name": "a", "stage": "build", "script": "x"},
		job{"name": "b", "stage": "build", "script": "x"},
		job{"name": "c", "stage": "build", "script": "x"})
	a := r.TakeNamed(t, "a")
	r.Finish(t, a, runnerclient.StateSuccess, "")
	r.TakeNamed(t, "b")

	w := callWait(inst.URL, p.ProjectID, p.ID, 1)
	if w.err != nil || w.res.Status != "running" || w.res.JobsRemaining != 2 || !slices.Equal(w.res.Finished, []int64{a.ID}) {
		t.Fatalf("wait: %+v, %v", w.res, w.err)
	}
	if w.took < time.Second || w.took > 1900*time.Millisecond {
		t.Errorf("timeout=1 answered after %v", w.took)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)

	w = callWait(inst.URL, p.ProjectID, p.ID, 0)
	if w.err != nil || w.res.JobsRemaining != 2 || w.took > 500*time.Millisecond {
		t.Fatalf("timeout=0: %+v after %v, %v", w.res, w.took, w.err)
	}
	for _, bad := range []string{"-1", "x", "601"} {
		resp, body := inst.Do(t, "GET", jobapitest.PipelinePath(p.ProjectID, p.ID)+"/wait?timeout="+bad, nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("timeout=%s: %d %s, want 400", bad, resp.StatusCode, body)
		}
	}
	if resp, _ := inst.Do(t, "GET", jobapitest.PipelinePath(p.ProjectID+1, p.ID)+"/wait?timeout=0", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("wait on another project's pipeline: %d, want 404", resp.StatusCode)
	}
}

// TestWaitWithoutRedis: with Redis unreachable the whole time, builds still run and a parked
// waiter still answers within its fast poll (250 ms), not its 2 s safety net.
func TestWaitWithoutRedis(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.RedisURL = "redis://" + dead + "/0" }})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 12, "", []string{"build", "test"},
		job{"name": "a", "stage": "build", "script": "x"},
		job{"name": "b", "stage": "test", "script": "x"})
	a := r.TakeNamed(t, "a")
	r.Finish(t, a, runnerclient.StateSuccess, "")
	b := r.TakeNamed(t, "b")
	waited := make(chan waitCall, 1)
	go func() { waited <- callWait(inst.URL, p.ProjectID, p.ID, 30) }()
	select {
	case w := <-waited:
		t.Fatalf("waiter returned early: %+v", w)
	case <-time.After(300 * time.Millisecond):
	}
	sent := time.Now()
	r.Finish(t, b, runnerclient.StateSuccess, "")
	w := <-waited
	if w.err != nil || w.res.Status != "success" || w.res.JobsRemaining != 0 {
		t.Fatalf("wait: %+v, %v", w.res, w.err)
	}
	lat := w.at.Sub(sent)
	t.Logf("without Redis: final update sent → wait answer %v", lat)
	if lat > time.Second {
		t.Errorf("without Redis the waiter answered %v after the end: it does not fall back to its fast poll", lat)
	}
	checkWaitAnswer(t, inst, p.ID, w.res)
}

// TestWaitThousandsOfJobsAcrossRedisRestarts: 2000 jobs in 4 stages run by 16 concurrent
// runners while the replica's Redis restarts (empty) twice; `jobapi wait`'s loop must end
// with jobs_remaining 0 and report every finished build.
func TestWaitThousandsOfJobsAcrossRedisRestarts(t *testing.T) {
	t.Parallel()
	const (
		stages   = 4
		perStage = 500
		total    = stages * perStage
		runners  = 16
	)
	rs := testenv.OwnRedis(t)
	logs := &logBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Log: logs, Configure: func(c *server.Config) {
		c.RedisURL = rs.URL
		c.DatabaseMaxConns = 16
		// Every finish commits under the pipeline's row lock: on this shared test server a
		// WAL flush per commit dominates the run. Visibility is the same without it.
		c.DatabaseURL = withParam(c.DatabaseURL, "synchronous_commit=off")
	}})
	stageNames := make([]string, stages)
	for i := range stageNames {
		stageNames[i] = fmt.Sprintf("s%d", i)
	}
	jobs := make([]job, 0, total)
	for i := range total {
		jobs = append(jobs, job{"name": fmt.Sprintf("j%04d", i), "stage": stageNames[i/perStage], "script": "echo hi"})
	}
	p := createPipeline(t, inst, 20, "", stageNames, jobs...)
	eventsSubscribed(t, inst, 1)
	// About 30 s on an idle 2-CPU machine under -race; the bound is for a busy one.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	start := time.Now()

	// Pipeline status as Postgres has it, sampled all along.
	var statusMu sync.Mutex
	var statuses statusLog
	statuses.add(p.Status)
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for ctx.Err() == nil {
			var st string
			if err := inst.Pool.QueryRow(ctx, `SELECT status FROM pipelines WHERE id = $1`, p.ID).Scan(&st); err == nil {
				statusMu.Lock()
				statuses.add(st)
				statusMu.Unlock()
				if terminal(st) {
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The operator's wait loop, short calls.
	type answer struct {
		at time.Time
		p  operatorclient.Progress
	}
	var ansMu sync.Mutex
	var answers []answer
	waitDone := make(chan struct{})
	var final operatorclient.Progress
	var waitErr error
	go func() {
		defer close(waitDone)
		oc := operatorclient.New(inst.URL, jobapitest.AdminToken)
		final, waitErr = oc.WaitPipeline(ctx, p.ProjectID, p.ID, operatorclient.WaitOptions{
			PerCall: 2 * time.Second, MaxBackoff: 200 * time.Millisecond,
			OnProgress: func(pr operatorclient.Progress) {
				ansMu.Lock()
				answers = append(answers, answer{time.Now(), pr})
				ansMu.Unlock()
			}})
	}()

	// Runners: loop on requests; retry every call that did not get a definite answer.
	var finished, transportErrs, serverErrs atomic.Int64
	var lastFinalSent atomic.Int64 // unix nanos of the last final update sent
	var rwg sync.WaitGroup
	runCtx, stopRunners := context.WithCancel(ctx)
	defer stopRunners()
	var failMu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		failMu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		failMu.Unlock()
	}
	for i := range runners {
		c := inst.NewRunner(t)
		c.HTTP.Timeout = 10 * time.Second
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for runCtx.Err() == nil {
				j, res, err := c.RequestJob(runCtx)
				switch {
				case err != nil:
					if runCtx.Err() == nil {
						transportErrs.Add(1)
						time.Sleep(20 * time.Millisecond)
					}
					continue
				case j == nil:
					if res.Code >= 500 {
						serverErrs.Add(1)
					} else if res.Code != http.StatusNoContent && res.Code != http.StatusConflict {
						fail("runner %d: job request answered %d %s", i, res.Code, res.Message)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				// A log line (every tenth job: the trace is not what this test is about), then
				// the final update, each until the server takes it.
				line := []byte("$ echo hi\nhi\n")
				for j.ID%10 == 0 && runCtx.Err() == nil {
					pr, err := c.PatchTrace(runCtx, j, 0, line)
					if err == nil && (pr.Code == http.StatusAccepted || (pr.Code == http.StatusRequestedRangeNotSatisfiable && pr.Offset == len(line))) {
						break
					}
					if err == nil && pr.Code < 500 {
						fail("job %d: trace patch answered %d %s", j.ID, pr.Code, pr.JobStatus)
						break
					}
					serverErrs.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
				for runCtx.Err() == nil {
					lastFinalSent.Store(time.Now().UnixNano())
					u, err := c.UpdateJob(runCtx, j, runnerclient.StateSuccess, runnerclient.UpdateOptions{})
					if err == nil && u.Code == http.StatusOK {
						finished.Add(1)
						break
					}
					if err == nil && u.Code < 500 {
						fail("job %d: final update answered %d Job-Status %q", j.ID, u.Code, u.JobStatus)
						break
					}
					if err != nil {
						transportErrs.Add(1)
					} else {
						serverErrs.Add(1)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}

	// Restart Redis (it comes back empty) twice while the wait goes on.
	var restarts []time.Time
	restarterDone := make(chan struct{})
	go func() {
		defer close(restarterDone)
		for _, at := range []int64{total / 4, total * 13 / 20} {
			for finished.Load() < at {
				select {
				case <-ctx.Done():
					return
				case <-waitDone:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			if err := rs.Restart(ctx); err != nil {
				fail("restart redis: %v", err)
				return
			}
			restarts = append(restarts, time.Now())
		}
	}()

	<-waitDone
	waitReturned := time.Now()
	stopRunners()
	rwg.Wait()
	<-restarterDone
	// The sampler stops by itself at the end status; canceling it at once could cut it off
	// between the wait's answer and its next sample.
	select {
	case <-samplerDone:
	case <-time.After(5 * time.Second):
	}
	cancel()
	<-samplerDone
	for _, f := range failures {
		t.Error(f)
	}
	if waitErr != nil {
		t.Fatalf("WaitPipeline: %v (last %d finished, %d remaining)", waitErr, len(final.Finished), final.JobsRemaining)
	}
	if len(restarts) != 2 {
		t.Fatalf("Redis restarted %d times, want 2 during the wait", len(restarts))
	}
	if final.JobsRemaining != 0 || final.Status != "success" {
		t.Errorf("final answer: %s with %d remaining", final.Status, final.JobsRemaining)
	}
	want := finishedInDB(t, inst, p.ID)
	if len(want) != total || !slices.Equal(final.Finished, want) {
		t.Errorf("final answer lists %d finished builds, Postgres has %d finished (of %d)", len(final.Finished), len(want), total)
	}
	var builds, successes, assigned, finishedEvents int
	if err := inst.Pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE status = 'success'),
        (SELECT count(*) FROM build_events e JOIN builds b ON b.id = e.build_id WHERE b.pipeline_id = $1 AND e.type = 'assigned'),
        (SELECT count(*) FROM build_events e JOIN builds b ON b.id = e.build_id WHERE b.pipeline_id = $1 AND e.type = 'finished')
        FROM builds WHERE pipeline_id = $1`, p.ID).Scan(&builds, &successes, &assigned, &finishedEvents); err != nil {
		t.Fatal(err)
	}
	if builds != total || successes != total || assigned != total || finishedEvents != total {
		t.Errorf("Postgres: %d builds, %d success, %d assigned events, %d finished events; want %d of each",
			builds, successes, assigned, finishedEvents, total)
	}

	// Every answer is one consistent snapshot, and progress never goes back.
	var prev []int64
	between := 0
	for i, a := range answers {
		if len(a.p.Finished)+a.p.JobsRemaining != total {
			t.Errorf("answer %d: %d finished + %d remaining != %d", i, len(a.p.Finished), a.p.JobsRemaining, total)
		}
		if !sort.SliceIsSorted(a.p.Finished, func(x, y int) bool { return a.p.Finished[x] < a.p.Finished[y] }) {
			t.Fatalf("answer %d: finished not sorted", i)
		}
		for _, id := range prev {
			if _, ok := slices.BinarySearch(a.p.Finished, id); !ok {
				t.Errorf("answer %d: build %d was reported finished before and is missing now", i, id)
				break
			}
		}
		prev = a.p.Finished
		if a.at.After(restarts[0]) && a.at.Before(restarts[1]) {
			between++
		}
	}
	statuses.want(t, "pending", "running", "success")

	// The restarts did reach the replica: its subscription broke, and it is back.
	broke := 0
	for _, rec := range logs.records(t) {
		if rec["msg"] == "pipeline events unavailable; waiters poll Postgres" {
			broke++
		}
	}
	if broke < 2 {
		t.Errorf("the pipeline-events subscription broke %d times, want at least once per restart", broke)
	}
	eventsSubscribed(t, inst, 1)
	last := time.Unix(0, lastFinalSent.Load())
	t.Logf("%d jobs, %d stages, %d runners: pipeline done in %v; %d wait answers (%d between the restarts); "+
		"last final update sent → WaitPipeline returned %v; runner transport errors %d, 5xx %d; Redis restarts at %v and %v; subscription broke %d times",
		total, stages, runners, waitReturned.Sub(start).Round(time.Millisecond), len(answers), between,
		waitReturned.Sub(last).Round(time.Millisecond), transportErrs.Load(), serverErrs.Load(),
		restarts[0].Sub(start).Round(time.Millisecond), restarts[1].Sub(start).Round(time.Millisecond), broke)
	if between == 0 {
		t.Errorf("no wait answer between the two Redis restarts")
	}
	if lat := waitReturned.Sub(last); lat > 1500*time.Millisecond { // sanity bound; TestWaitLatency measures it
		t.Errorf("WaitPipeline returned %v after the last final update", lat)
	}
}

// withParam adds a query parameter (a Postgres runtime setting for pgx) to a URL.
func withParam(u, kv string) string {
	if strings.Contains(u, "?") {
		return u + "&" + kv
	}
	return u + "?" + kv
}
