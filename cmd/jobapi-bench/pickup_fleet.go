package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
)

// The pickup fleet is the child process's side of the pickup scenario: N runners that each
// ask for a job every interval (echoing last_update), as gitlab-runner does; one that gets
// a job acks it, finishes it and goes on asking. Against a replica with JOBAPI_LONG_POLL a
// request is held, and a runner whose request took longer than its interval asks again at
// once. Lines on stdin drive it: "go" after "warm", "count" (answered "count N": job
// requests sent so far), "stop" (answered with a pickupFleetResult).

// pickupEvent is one 201: which build and when it arrived (Unix nanoseconds: the parent
// process compares it with when it created the job, on the same clock).
type pickupEvent struct {
	BuildID int64 `json:"build_id"`
	At      int64 `json:"at_unix_ns"`
}

type pickupFleetResult struct {
	Pickups []pickupEvent  `json:"pickups"`
	Polls   []int64        `json:"poll_ns"` // 204 answers' latencies, poll mode
	Errors  map[string]int `json:"errors"`
	LastErr map[string]string
	// Answers: every job request's answer by class (pickupMode.Answers).
	Answers map[string]int `json:"answers"`
}

func pickupFleetMain(spec fleetSpec, in *bufio.Reader, stdout io.Writer) error {
	clients := make([]*runnerclient.Client, len(spec.Runners))
	for i, r := range spec.Runners {
		clients[i] = runnerclient.New(spec.BaseURL, r.Token, r.SystemID)
	}
	var (
		requests atomic.Int64
		mu       sync.Mutex
		res      = pickupFleetResult{Errors: map[string]int{}, LastErr: map[string]string{}, Answers: map[string]int{}}
	)
	answered := func(class string) {
		mu.Lock()
		res.Answers[class]++
		mu.Unlock()
	}
	fail := func(what string, err error) {
		mu.Lock()
		res.Errors[what]++
		res.LastErr[what] = err.Error()
		mu.Unlock()
	}
	// A runner that gets a job runs it to success at once, so that nothing is left to
	// time out and be retried into a second pickup.
	runJob := func(ctx context.Context, c *runnerclient.Client, job *runnerclient.Job) {
		// "stop" does not cut a job short: it would stay assigned and be retried.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if ur, err := c.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}); err != nil || ur.Code != http.StatusOK {
			fail("ack", callErr(err, ur.Code))
			return
		}
		if ur, err := c.UpdateJob(ctx, job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil || ur.Code != http.StatusOK {
			fail("finish", callErr(err, ur.Code))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	phase := func(i int) time.Duration { return spec.Interval * time.Duration(i) / time.Duration(len(clients)) }

	// Warm-up: every runner asks once, spread over one interval (a fresh runner has no
	// last_update: this one goes to Postgres).
	warmCtx, warmCancel := context.WithTimeout(ctx, 10*spec.Interval+time.Minute)
	loadgen(warmCtx, len(clients), func(ctx context.Context, i int) {
		sleepCtx(ctx, phase(i))
		if _, res, err := clients[i].RequestJob(ctx); err != nil || res.Code != http.StatusNoContent {
			fail("warm-up", callErr(err, res.Code))
		}
	})
	warmCancel()
	fmt.Fprintln(stdout, "warm")
	if line, _ := in.ReadString('\n'); line != "go\n" {
		return fmt.Errorf("want go, got %q", line)
	}

	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := start.Add(phase(i))
			for ctx.Err() == nil {
				sleepCtx(ctx, time.Until(next))
				if ctx.Err() != nil {
					return
				}
				next = next.Add(spec.Interval)
				t := time.Now()
				requests.Add(1)
				job, r, err := c.RequestJob(ctx)
				d := time.Since(t)
				retryAfter, _ := strconv.Atoi(r.Header.Get("Retry-After"))
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					answered("transport")
					fail("request", err)
				case job != nil:
					answered("201")
					mu.Lock()
					res.Pickups = append(res.Pickups, pickupEvent{BuildID: job.ID, At: time.Now().UnixNano()})
					mu.Unlock()
					runJob(ctx, c, job)
				case (r.Code == http.StatusServiceUnavailable || r.Code == http.StatusTooManyRequests) && retryAfter > 0:
					// gitlab-runner's transport waits Retry-After and asks again; the runner
					// stays healthy.
					answered(strconv.Itoa(r.Code) + "+Retry-After")
					sleepCtx(ctx, time.Duration(retryAfter)*time.Second)
					next = time.Now()
				case r.Code != http.StatusNoContent:
					answered(strconv.Itoa(r.Code))
					fail("request", callErr(nil, r.Code))
				default:
					answered("204")
					if !spec.LongPoll {
						mu.Lock()
						res.Polls = append(res.Polls, int64(d))
						mu.Unlock()
					}
				}
				if now := time.Now(); next.Before(now) {
					// Held past the interval (long poll) or slow: ask again at once.
					next = now
				}
			}
		}()
	}
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		switch line {
		case "count\n":
			fmt.Fprintf(stdout, "count %d\n", requests.Load())
		case "stop\n":
			cancel()
			wg.Wait()
			for _, c := range clients {
				c.CloseIdleConnections()
			}
			mu.Lock()
			defer mu.Unlock()
			return json.NewEncoder(stdout).Encode(res)
		default:
			return fmt.Errorf("unexpected %q", line)
		}
	}
}
