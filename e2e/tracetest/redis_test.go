package tracetest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// logExecutor is a job's script: it writes lines of output, pausing now and then so that
// the runner's PATCHes interleave with the writing, and calls at(line) at the lines the test
// chose, with the output and its length so far, before writing on (the test injects its
// faults there); at returns the length after what it wrote itself.
type logExecutor struct {
	lines int
	at    map[int]func(out io.Writer, written int) int
}

func (e *logExecutor) Run(ctx context.Context, _ *runnerclient.Job, step runnerclient.Step, out io.Writer) error {
	if step.Name != "script" {
		return nil
	}
	written := 0
	for i := range e.lines {
		if f := e.at[i]; f != nil {
			written = f(out, written)
		}
		n, _ := fmt.Fprintf(out, "%06d %s\n", i, bytes.Repeat([]byte{'a' + byte(i%26)}, 40+i%50))
		written += n
		if i%50 == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

// statusCounter counts the answers to the runner's calls by method and status; beforeFinal,
// when set, runs once before the first final update (PUT state=success) is sent.
type statusCounter struct {
	base        http.RoundTripper
	mu          sync.Mutex
	n           map[string]int
	beforeFinal func()
}

func (c *statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.mu.Lock()
		f := c.beforeFinal
		if bytes.Contains(body, []byte(`"state":"success"`)) {
			c.beforeFinal = nil
		} else {
			f = nil
		}
		c.mu.Unlock()
		if f != nil {
			f()
		}
	}
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.n[fmt.Sprintf("%s %d", r.Method, resp.StatusCode)]++
		c.mu.Unlock()
	}
	return resp, err
}

func (c *statusCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func countStatuses(r *jobapitest.Runner) *statusCounter {
	base := r.HTTP.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := &statusCounter{base: base, n: map[string]int{}}
	r.HTTP.Transport = c
	return c
}

// traceJob creates a one-job pipeline on project 7 and takes the job with a new runner.
func traceJob(t *testing.T, a *jobapitest.Instance) (*jobapitest.Runner, *runnerclient.Job) {
	t.Helper()
	r := a.NewRunner(t)
	a.CreatePipeline(t, 7, []string{"test"}, jobapitest.Job{"name": "log", "stage": "test", "script": "make test"})
	return r, r.Take(t)
}

// storedLog is the job's log as an operator reads it.
func storedLog(t *testing.T, a *jobapitest.Instance, id int64) []byte {
	t.Helper()
	resp, b := a.Do(t, "GET", fmt.Sprintf("/api/v4/projects/7/jobs/%d/trace", id), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET trace: %d %s", resp.StatusCode, b)
	}
	return b
}

// waitAllSent waits until the server holds the first n bytes of the log in its live tail
// (the runner sent everything written so far and nothing is being appended).
func waitAllSent(t *testing.T, live *redisstore.Store, id int64, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the live log of job %d reaches %d bytes", id, n), func() bool {
		base, data, ok, err := live.Tail(context.Background(), id)
		return err == nil && ok && base+int64(len(data)) == int64(n)
	})
}

func checkLog(t *testing.T, a *jobapitest.Instance, job *runnerclient.Job, out runnerclient.Outcome, err error) {
	t.Helper()
	if err != nil || out.Result != runnerclient.Succeeded || out.FinalCode != http.StatusOK {
		t.Fatalf("job: result %v, final update %d, err %v; want success answered 200", out.Result, out.FinalCode, err)
	}
	got := storedLog(t, a, job.ID)
	if !bytes.Equal(got, out.Trace) {
		at := 0
		for at < min(len(got), len(out.Trace)) && got[at] == out.Trace[at] {
			at++
		}
		t.Fatalf("stored log: %d bytes, the runner's %d; they differ from byte %d", len(got), len(out.Trace), at)
	}
	if d := a.Job(t, 7, job.ID); d.TraceSize != int64(len(out.Trace)) || d.Status != "success" {
		t.Errorf("job: %s with trace_size %d; want success with %d", d.Status, d.TraceSize, len(out.Trace))
	}
}

// Redis restarts (empty: it keeps nothing on disk) three times while a job streams its log:
// twice mid-job, when the live tail holds bytes Postgres does not, and once right before
// the final update, after the runner's last PATCH was answered 202: the unflushed end of
// the log is lost and the runner has nothing left to PATCH. The mid-job losses are found by
// the next PATCH (416: resend from the durable size), the last by the final update (412:
// the runner rewinds and re-PATCHes). Afterwards the log is the runner's, byte for byte.
func TestTraceSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	own := testenv.OwnRedis(t)
	a := jobapitest.Start(t, jobapitest.Options{Configure: jobapitest.OnRedis(own, func(c *server.Config) { c.TraceChunkSize = 32 << 10 })})
	live := redisstore.New(a.Redis, a.Config.RedisKeyPrefix)
	r, job := traceJob(t, a)
	calls := countStatuses(r)
	ctx := context.Background()
	restart := func(out io.Writer, written int) int {
		// Until the tail holds bytes Postgres does not (a flush can take them all when
		// they make whole chunks): what the restart loses.
		for {
			n, _ := fmt.Fprintf(out, "--- Redis restarts after %d bytes\n", written)
			written += n
			waitAllSent(t, live, job.ID, written)
			if base, data, _, _ := live.Tail(ctx, job.ID); len(data) > 0 {
				t.Logf("Redis restarts with %d live bytes from offset %d", len(data), base)
				break
			}
		}
		if err := own.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		return written
	}
	calls.beforeFinal = func() {
		base, data, ok, err := live.Tail(ctx, job.ID)
		if err != nil || !ok || len(data) == 0 {
			t.Errorf("before the final update the live tail is %d bytes from %d (ok=%v, err=%v): the restart would lose nothing",
				len(data), base, ok, err)
		}
		if err := own.Restart(ctx); err != nil {
			t.Error(err)
		}
	}
	const lines = 4000
	exec := &logExecutor{lines: lines, at: map[int]func(io.Writer, int) int{1500: restart, 3000: restart}}
	out, err := r.RunJob(ctx, job, exec)
	checkLog(t, a, job, out, err)
	if calls.get("PATCH 416") == 0 || calls.get("PUT 412") == 0 {
		t.Errorf("answers %v: want 416s after the restarts mid-job and a 412 after the last", calls.n)
	}
	t.Logf("%d bytes in %d PATCHes; answers %v", len(out.Trace), out.Patches, calls.n)
}

// Redis refuses writes while a job streams its log (out of memory: every script that writes
// is refused), then takes them again with its old, stale tail still there. While it
// refuses, the PATCHes go to Postgres (the runner is told to resend from the durable size
// once); when it is back, its tail is behind Postgres and the runner resends from its end.
// The log, mixed from Postgres chunks and the Redis tail, is whole and in order.
func TestTraceWhileRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	own := testenv.OwnRedis(t)
	// The object store is down: the finished log stays in Postgres, unarchived, for the
	// count of its chunks below (its archive would drop them).
	store := testenv.S3(t)
	store.Proxy.Stop()
	a := jobapitest.Start(t, jobapitest.Options{Configure: jobapitest.OnRedis(own, func(c *server.Config) {
		c.TraceChunkSize = 32 << 10
		c.ObjectStore = store.URL()
		c.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: store.AccessKeyID, SecretAccessKey: store.SecretAccessKey}
	})})
	live := redisstore.New(a.Redis, a.Config.RedisKeyPrefix)
	r, job := traceJob(t, a)
	calls := countStatuses(r)
	ctx := context.Background()
	chunks := func() int {
		return jobapitest.QueryInt(t, a.Pool, "SELECT count(*) FROM build_trace_chunks WHERE build_id = $1", job.ID)
	}
	var refusedAt, chunksAtRefusal int
	refuse := func(_ io.Writer, written int) int {
		waitAllSent(t, live, job.ID, written)
		refusedAt, chunksAtRefusal = written, chunks()
		if err := a.Redis.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		return written
	}
	accept := func(_ io.Writer, written int) int {
		// Everything written while Redis refused reached Postgres first.
		testenv.Eventually(t, 10*time.Second, "the log written while Redis refused stored in Postgres", func() bool {
			return jobapitest.QueryInt(t, a.Pool, "SELECT trace_size FROM builds WHERE id = $1", job.ID) == written
		})
		if err := a.Redis.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		return written
	}
	const lines = 4000
	exec := &logExecutor{lines: lines, at: map[int]func(io.Writer, int) int{1200: refuse, 2400: accept}}
	out, err := r.RunJob(ctx, job, exec)
	checkLog(t, a, job, out, err)
	if n := chunks(); n-chunksAtRefusal < 3 {
		t.Errorf("%d chunks in Postgres, %d at the refusal (offset %d): want the PATCHes made while Redis refused among them",
			n, chunksAtRefusal, refusedAt)
	}
	if calls.get("PATCH 416") < 2 {
		t.Errorf("answers %v: want a 416 when Redis refused (resend from the durable size) and one when it was back", calls.n)
	}
	if kinds := a.RedisErrorKinds(t); kinds == "" {
		t.Errorf("no Redis error counted while it refused writes")
	}
	t.Logf("%d bytes in %d PATCHes; answers %v; Redis errors %s", len(out.Trace), out.Patches, calls.n, a.RedisErrorKinds(t))
}
