package tracetest_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// raceLog is job i's log: the bytes its patcher sends, in order.
func raceLog(i int) []byte {
	var b bytes.Buffer
	for n := 0; b.Len() < 64<<10; n++ {
		fmt.Fprintf(&b, "job %d line %05d %s\n", i, n, bytes.Repeat([]byte{'a' + byte((i+n)%26)}, 30+n%40))
	}
	return b.Bytes()
}

// Many jobs stream their logs through two replicas while something ends each of them: the
// runner's final update, an operator's cancel (the runner then finishes it canceled), a
// cancel racing the final update, the execution-timeout reaper. Live chunks are flushed
// every KiB, so flushes race the finishes too. Afterwards, for every job:
//   - the log as served (its archive, read with LiveLog.Open, which closes the live tail) is a
//     prefix of what the runner sent, and holds every byte a PATCH had answered 202;
//   - no PATCH sent after the finish was answered (or the reaper's pass returned) got a 202:
//     the runner is told its job ended at once, not at the next state check;
//   - a PATCH after the archive's read is refused, and the log read again is the same.
func TestTraceRacesFinishes(t *testing.T) {
	t.Parallel()
	const jobs = 16
	// The reaper case runs its own passes, one at a time; the replicas' background passes
	// (every 100 ms in tests) would reap the same jobs concurrently, and a PATCH between such
	// a pass's commit and its closing of the log is not the race this test measures.
	quiet := func(c *server.Config) { c.SweepInterval, c.MaintenanceInterval = time.Hour, time.Hour }
	a := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.TraceChunkSize = 1 << 10; quiet(c) }})
	b := a.Replica(t, jobapitest.Options{Configure: quiet})
	ctx := context.Background()
	runner := a.NewRunner(t)
	specs := make([]jobapitest.Job, jobs)
	for i := range specs {
		specs[i] = jobapitest.Job{"name": fmt.Sprintf("job%02d", i), "stage": "test", "script": "make"}
	}
	a.CreatePipeline(t, 7, []string{"test"}, specs...)
	taken := make([]*runnerclient.Job, jobs)
	for i := range taken {
		taken[i] = runner.Take(t)
	}
	// The runner's client on each replica.
	clients := []*jobapitest.Runner{jobapitest.NewRunner(t, a.URL, "", "x"), jobapitest.NewRunner(t, b.URL, "", "x")}

	type outcome struct {
		log        []byte
		acked      int       // end of the longest 202
		ended      time.Time // the finish was answered (zero: not by this test)
		late       []string  // 202s to PATCHes sent after ended
		patches    int
		finalCodes []int
	}
	outs := make([]outcome, jobs)
	var wg sync.WaitGroup
	var reaping sync.Mutex
	for i, job := range taken {
		out := &outs[i]
		out.log = raceLog(i)
		var endedNs atomic.Int64
		stop, warm := make(chan struct{}), make(chan struct{})
		var warmOnce sync.Once
		wg.Go(func() { // the runner's patcher
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			off := 0
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				end := min(len(out.log), off+100+rng.IntN(400))
				if off >= len(out.log) {
					end = off
					time.Sleep(time.Millisecond)
				}
				sent := time.Now()
				res, err := clients[n%2].PatchTrace(ctx, job, off, out.log[off:end])
				if err != nil && res.Code == 0 {
					t.Errorf("job %d: PATCH: %v", i, err)
					return
				}
				out.patches++
				if out.patches == 20 {
					warmOnce.Do(func() { close(warm) })
				}
				switch res.Code {
				case http.StatusAccepted:
					if e := endedNs.Load(); e != 0 && sent.UnixNano() > e {
						out.late = append(out.late, fmt.Sprintf("%d-%d", off, end))
					}
					out.acked = max(out.acked, res.Offset)
					off = res.Offset
				case http.StatusRequestedRangeNotSatisfiable:
					off = res.Offset
				case http.StatusForbidden:
					warmOnce.Do(func() { close(warm) })
					return
				default:
					if res.Code != 0 {
						t.Errorf("job %d: PATCH %d-%d: %d", i, off, end, res.Code)
						warmOnce.Do(func() { close(warm) })
						return
					}
				}
			}
		})
		wg.Go(func() { // what ends the job
			defer close(stop)
			// Mid-stream: after the patcher's first PATCHes, at a different moment each.
			<-warm
			time.Sleep(time.Duration(i%5) * 3 * time.Millisecond)
			put := func(state string) {
				res, _ := clients[i%2].UpdateJob(ctx, job, state, runnerclient.UpdateOptions{})
				out.finalCodes = append(out.finalCodes, res.Code)
			}
			cancel := func() {
				resp, body := a.Do(t, "POST", fmt.Sprintf("/api/v4/projects/7/jobs/%d/cancel", job.ID), nil)
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict { // 409: finished first
					t.Errorf("job %d: cancel: %d %s", i, resp.StatusCode, body)
				}
			}
			switch i % 4 {
			case 0:
				put(runnerclient.StateSuccess)
			case 1:
				cancel()
				time.Sleep(10 * time.Millisecond)
				put(runnerclient.StateFailed)
			case 2:
				var cwg sync.WaitGroup
				cwg.Go(cancel)
				cwg.Go(func() { put(runnerclient.StateSuccess) })
				cwg.Wait()
			case 3:
				if _, err := a.Pool.Exec(ctx, "UPDATE builds SET run_deadline = now() - interval '1 hour' WHERE id = $1", job.ID); err != nil {
					t.Error(err)
				}
				// One pass at a time: "ended" is when the pass that reaped this job returned
				// (a concurrent pass may take it and close its log a moment later). A pass
				// skips a row another statement holds locked (SKIP LOCKED: a PATCH's flush
				// of this very job), and the job then runs on until a later pass: passes go
				// on until Postgres has the job ended.
				for reaped := false; !reaped; {
					reaping.Lock()
					if _, err := b.Reaper.ReapOnce(ctx); err != nil {
						t.Error(err)
					}
					var st string
					if err := a.Pool.QueryRow(ctx, "SELECT status FROM builds WHERE id = $1", job.ID).Scan(&st); err != nil {
						t.Error(err)
					}
					reaping.Unlock()
					reaped = st != "running" && st != "canceling"
					if !reaped {
						time.Sleep(time.Millisecond)
					}
				}
			}
			out.ended = time.Now()
			endedNs.Store(out.ended.UnixNano())
			// The patcher goes on until it is refused; give it the time to see that.
			time.Sleep(50 * time.Millisecond)
		})
	}
	wg.Wait()

	for i, job := range taken {
		out := &outs[i]
		d := a.Job(t, 7, job.ID)
		if d.Status == "running" || d.Status == "canceling" {
			t.Errorf("job %d: %s after its finish (final updates %v)", i, d.Status, out.finalCodes)
			continue
		}
		read := func() []byte {
			// The archive (which reads with LiveLog.Open) once it is written, the live log
			// before: a finished job's log, either way.
			got, err := a.Logs.Trace(ctx, 7, job.ID)
			if err != nil {
				t.Fatalf("job %d: read its log: %v", i, err)
			}
			return got
		}
		got := read()
		if !bytes.HasPrefix(out.log, got) || len(got) < out.acked {
			t.Errorf("job %d (%s): log of %d bytes, %d acknowledged; a prefix of what was sent: %v",
				i, d.Status, len(got), out.acked, bytes.HasPrefix(out.log, got))
		}
		if len(out.late) > 0 {
			t.Errorf("job %d (%s): PATCHes sent after the finish answered 202: %v", i, d.Status, out.late)
		}
		res, _ := clients[i%2].PatchTrace(ctx, job, len(got), []byte("after the archive's read\n"))
		if res.Code != http.StatusForbidden || res.JobStatus != d.Status {
			t.Errorf("job %d: PATCH after the archive's read: %d Job-Status %q, want 403 %q", i, res.Code, res.JobStatus, d.Status)
		}
		if again := read(); !bytes.Equal(again, got) {
			t.Errorf("job %d: log read again: %d bytes, first %d", i, len(again), len(got))
		}
		t.Logf("job %d: %s, %d of %d bytes in %d PATCHes; final updates %v", i, d.Status, len(got), len(out.log), out.patches, out.finalCodes)
	}
}
