package twophase_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

var requestSeq atomic.Int64

// answer is what a runner reads of a PUT: the status code, Job-Status and the body.
type answer struct {
	code      int
	jobStatus string
	body      string
}

func (a answer) String() string {
	return fmt.Sprintf("%d Job-Status %q %s", a.code, a.jobStatus, a.body)
}

// put sends a PUT /jobs/:id as gitlab-runner does (the token in the header and the body)
// with a request id of its own, and returns the answer and the id.
func put(t testing.TB, baseURL string, id int64, token, body string) (answer, string) {
	t.Helper()
	rid := fmt.Sprintf("coldack.%d", requestSeq.Add(1))
	hdr := []string{"X-Request-Id", rid, "Content-Type", "application/json"}
	if token != "" {
		hdr = append(hdr, "JOB-TOKEN", token)
	}
	resp, b := jobapitest.Send(t, baseURL, http.MethodPut, fmt.Sprintf("/api/v4/jobs/%d", id), body, hdr...)
	return answer{code: resp.StatusCode, jobStatus: resp.Header.Get("Job-Status"), body: string(bytes.TrimSpace(b))}, rid
}

func stateBody(token, state string) string {
	body := fmt.Sprintf(`{"token":%q,"state":%q,"info":{"name":"gitlab-runner","version":"19.4.0"}`, token, state)
	if state == stFailed {
		body += `,"failure_reason":"runner_system_failure"`
	}
	return body + "}"
}

// coldPair is a replica that assigns builds (warm: it knows them) and one that never saw
// them (cold), as a load balancer spreads a runner's calls.
type coldPair struct {
	warm, cold *jobapitest.Instance
	stmts      *statementsByRequest
	project    int64
}

func newColdPair(t *testing.T, configure func(*server.Config)) *coldPair {
	t.Helper()
	warm := jobapitest.Start(t, jobapitest.Options{Configure: configure})
	p := &coldPair{warm: warm, stmts: &statementsByRequest{}}
	p.cold = warm.Replica(t, jobapitest.Options{Tracer: p.stmts})
	var proj api.Project
	warm.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{
		"name": "cold", "repo_url": "https://git.example.com/grp/cold.git", "default_branch": "main"}, &proj)
	warm.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", proj.ID),
		map[string]any{"key": "DEPLOY_TOKEN", "value": "project-secret-1234", "masked": true}, nil)
	p.project = proj.ID
	enableFlag(t, warm, proj.ID)
	warm.WaitFlags(t)
	return p
}

// assign hands n new builds to a new two-phase runner on the warm replica.
func (p *coldPair) assign(t *testing.T, n int) (*jobapitest.Runner, []*runnerclient.Job) {
	t.Helper()
	tag := uniqueTag()
	r := taggedRunner(t, p.warm, tag, true)
	defs := make([]jobapitest.Job, n)
	for i := range defs {
		defs[i] = jobDef(fmt.Sprintf("build%d", i), tag)
	}
	p.warm.CreatePipeline(t, p.project, []string{"test"}, defs...)
	jobs := make([]*runnerclient.Job, n)
	for i := range jobs {
		jobs[i] = take(t, r)
	}
	return r, jobs
}

// TestColdAck: a replica that never saw a build (another replica assigned it) acks it in
// one statement, the ack's own compare-and-set carrying the job token, with the rate limits
// on (the default); and every row of SPEC §4's PUT table answers there byte for byte as on
// the replica that assigned the build.
func TestColdAck(t *testing.T) {
	t.Parallel()
	p := newColdPair(t, func(c *server.Config) { c.AckTTL = 30 * time.Second })
	if p.cold.Config.RateLimitJobUpdates <= 0 || p.cold.Config.RateLimitJobTokenFailures <= 0 {
		t.Fatalf("rate limits off (%d, %d): the cold ack must be one statement with them on",
			p.cold.Config.RateLimitJobUpdates, p.cold.Config.RateLimitJobTokenFailures)
	}
	live := redisstore.New(p.warm.Redis, p.warm.Config.RedisKeyPrefix)
	ctx := context.Background()

	t.Run("ack in one statement", func(t *testing.T) {
		t.Parallel()
		r, jobs := p.assign(t, 1)
		job := jobs[0]
		got, rid := put(t, p.cold.URL, job.ID, job.Token, stateBody(job.Token, stRunning))
		if want := (answer{200, stRunning, `{"status":"running"}`}); got != want {
			t.Fatalf("cold ack: %v, want %v", got, want)
		}
		if sqls := p.stmts.of(rid); len(sqls) != 1 || !strings.Contains(sqls[0], "UPDATE builds SET status = 'running'") {
			t.Errorf("cold ack ran %d statements, want the ack's one: %q", len(sqls), sqls)
		}
		j := p.warm.Job(t, p.project, job.ID)
		wantJob(t, j, stRunning, "")
		ev := p.warm.Events(t, p.project, job.ID)
		jobapitest.WantEvents(t, ev, "queued", "assigned", "acknowledged")
		if ev[2].RunnerManager != r.SystemID {
			t.Errorf("acknowledged by %q, want %q", ev[2].RunnerManager, r.SystemID)
		}
		if d := ackKeyTTL(t, p.warm, job.ID); d != -2 {
			t.Errorf("ack key still there after the cold ack (PTTL %v)", d)
		}
		// The ack left the cold replica what the trace needs: the armed live log and the
		// project's masked values, so the first PATCH there is Redis alone, and masked.
		rb := newRunner(t, p.cold.URL, r.Token, r.SystemID, true)
		res, err := rb.PatchTrace(ctx, job, 0, []byte("token project-secret-1234 in the log\n"))
		if err != nil || res.Code != http.StatusAccepted {
			t.Fatalf("first PATCH on the cold replica: %d %v", res.Code, err)
		}
		if _, data, ok, err := live.Tail(ctx, job.ID); err != nil || !ok || string(data) != "token xxxxxxxxxxxxxxxxxxx in the log\n" {
			t.Errorf("live tail %q (ok=%v, %v), want the project's secret masked", data, ok, err)
		}
		// The same ack again is a keep-alive of a running build.
		got, rid = put(t, p.cold.URL, job.ID, job.Token, stateBody(job.Token, stRunning))
		if want := (answer{200, stRunning, `{"status":"running"}`}); got != want {
			t.Fatalf("cold ack again: %v, want %v", got, want)
		}
		if sqls := p.stmts.of(rid); len(sqls) > 1 {
			t.Errorf("keep-alive after the ack ran %d statements, want at most a read: %q", len(sqls), sqls)
		}
	})

	// same sends each request to the cold replica first, then the same to the warm one, and
	// requires the two answers to be equal and want.
	same := func(t *testing.T, what string, id int64, token, body string, want answer) {
		t.Helper()
		cold, _ := put(t, p.cold.URL, id, token, body)
		warm, _ := put(t, p.warm.URL, id, token, body)
		if cold != want || warm != want {
			t.Errorf("%s: cold replica %v, warm %v; want %v", what, cold, warm, want)
		}
	}
	forbidden := func(status string) answer {
		if status == "" {
			return answer{403, "", `{"message":"403 Forbidden - invalid job token"}`}
		}
		return answer{403, status, fmt.Sprintf(`{"message":"403 Forbidden - job is not processing on runner (status %s)"}`, status)}
	}
	ok := func(status string) answer { return answer{200, status, fmt.Sprintf(`{"status":%q}`, status)} }

	t.Run("wrong token", func(t *testing.T) {
		t.Parallel()
		_, jobs := p.assign(t, 2)
		job, other := jobs[0], jobs[1]
		for _, state := range []string{stRunning, stPending, stFailed} {
			same(t, "another job's token, "+state, job.ID, other.Token, stateBody(other.Token, state), forbidden(""))
			made := "glcbt-" + strings.Repeat("0", 40)
			same(t, "made-up token, "+state, job.ID, made, stateBody(made, state), forbidden(""))
			same(t, "unknown job, "+state, job.ID+1_000_000, job.Token, stateBody(job.Token, state), forbidden(""))
			same(t, "no token, "+state, job.ID, "", stateBody("", state), forbidden(""))
		}
		same(t, "bad state, wrong token", job.ID, other.Token, stateBody(other.Token, "bogus"), forbidden(""))
		same(t, "bad state, right token", job.ID, job.Token, stateBody(job.Token, "bogus"),
			answer{400, "", `{"message":"state must be one of pending, running, success, failed; got \"bogus\""}`})
		same(t, "negative bytesize, wrong token", job.ID, other.Token,
			fmt.Sprintf(`{"token":%q,"state":"running","output":{"bytesize":-1}}`, other.Token), forbidden(""))
		wantJob(t, p.warm.Job(t, p.project, job.ID), stWaiting, "")
		jobapitest.WantEvents(t, p.warm.Events(t, p.project, job.ID), "queued", "assigned")
	})

	t.Run("waiting keep-alive and decline", func(t *testing.T) {
		t.Parallel()
		_, jobs := p.assign(t, 1)
		job := jobs[0]
		same(t, "keep-alive", job.ID, job.Token, stateBody(job.Token, stPending), ok(stWaiting))
		jobapitest.WantEvents(t, p.warm.Events(t, p.project, job.ID), "queued", "assigned", "keepalive", "keepalive")
		cold, _ := put(t, p.cold.URL, job.ID, job.Token, stateBody(job.Token, stFailed))
		if cold != ok(stFailed) {
			t.Fatalf("cold decline: %v, want %v", cold, ok(stFailed))
		}
		same(t, "decline again", job.ID, job.Token, stateBody(job.Token, stFailed), ok(stFailed))
		same(t, "ack after the decline", job.ID, job.Token, stateBody(job.Token, stRunning), forbidden(stFailed))
		wantJob(t, p.warm.Job(t, p.project, job.ID), stFailed, "runner_system_failure")
	})

	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		_, jobs := p.assign(t, 1)
		job := jobs[0]
		p.warm.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/cancel", p.project, job.ID), nil, nil)
		for _, state := range []string{stRunning, stPending, stFailed} {
			same(t, "canceled, "+state, job.ID, job.Token, stateBody(job.Token, state), forbidden(stCanceled))
		}
	})

	t.Run("running, canceling, finished", func(t *testing.T) {
		t.Parallel()
		r, jobs := p.assign(t, 3)
		for _, job := range jobs {
			jobapitest.WantUpdate(t, "warm ack", r.Put(t, job, stRunning, runnerclient.UpdateOptions{}), http.StatusOK, stRunning)
		}
		running, canceling, finished := jobs[0], jobs[1], jobs[2]
		cold, rid := put(t, p.cold.URL, running.ID, running.Token, stateBody(running.Token, stRunning))
		if cold != ok(stRunning) {
			t.Fatalf("cold keep-alive of a running build: %v", cold)
		}
		if sqls := p.stmts.of(rid); len(sqls) != 2 {
			t.Errorf("cold keep-alive of a running build ran %d statements, want 2 (the ack that matches nothing, the read): %q", len(sqls), sqls)
		}
		for _, state := range []string{stRunning, stPending} {
			same(t, "running, "+state, running.ID, running.Token, stateBody(running.Token, state), ok(stRunning))
		}

		p.warm.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/cancel", p.project, canceling.ID), nil, nil)
		same(t, "canceling, running", canceling.ID, canceling.Token, stateBody(canceling.Token, stRunning), ok("canceling"))

		jobapitest.WantUpdate(t, "warm success", r.Put(t, finished, stSuccess, runnerclient.UpdateOptions{}), http.StatusOK, stSuccess)
		for _, state := range []string{stRunning, stPending, stFailed} {
			same(t, "success, "+state, finished.ID, finished.Token, stateBody(finished.Token, state), forbidden(stSuccess))
		}
		same(t, "success again", finished.ID, finished.Token, stateBody(finished.Token, stSuccess), ok(stSuccess))
		jobapitest.WantEvents(t, p.warm.Events(t, p.project, finished.ID), "queued", "assigned", "acknowledged", "finished")
	})
}

// TestColdAckTimedOut: a build the sweeper timed out answers its late ack with 403 and
// Job-Status failed on a replica that never saw it, as on the one that assigned it.
func TestColdAckTimedOut(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	p := newColdPair(t, func(c *server.Config) { c.AckTTL = ttl })
	_, jobs := p.assign(t, 1)
	job := jobs[0]
	time.Sleep(ttl + 50*time.Millisecond)
	if rep, err := p.warm.Sweeper.SweepOnce(context.Background()); err != nil || rep.TimedOut != 1 {
		t.Fatalf("sweep: %+v %v, want one build timed out", rep, err)
	}
	want := answer{403, stFailed, `{"message":"403 Forbidden - job is not processing on runner (status failed)"}`}
	for _, state := range []string{stRunning, stPending, stFailed} {
		for _, inst := range []*jobapitest.Instance{p.cold, p.warm} {
			if got, _ := put(t, inst.URL, job.ID, job.Token, stateBody(job.Token, state)); got != want {
				t.Errorf("state=%s after the timeout: %v, want %v", state, got, want)
			}
		}
	}
	wantJob(t, p.warm.Job(t, p.project, job.ID), stFailed, provisioningTimeout)
}

// TestColdAckRateLimits: on a replica that never saw the build, wrong job tokens still
// spend their client's failure budget (403, then 429) and never the job's, and the ack,
// though admitted after its compare-and-set, spends the job's budget like any PUT.
func TestColdAckRateLimits(t *testing.T) {
	t.Parallel()
	const perJob = 5
	p := newColdPair(t, func(c *server.Config) { c.RateLimitJobTokenFailures, c.RateLimitJobUpdates = 3, perJob })
	_, jobs := p.assign(t, 1)
	job := jobs[0]
	var codes []int
	for i := 0; i < 5; i++ {
		bogus := "glcbt-bogus-" + strings.Repeat("1", 30)
		got, _ := put(t, p.cold.URL, job.ID, bogus, stateBody(bogus, stRunning))
		codes = append(codes, got.code)
	}
	if fmt.Sprint(codes) != "[403 403 403 429 429]" {
		t.Errorf("bogus acks on the cold replica got %v, want 3×403 then 429", codes)
	}
	if got := p.cold.Metric(t, `jobapi_rate_limit_total{outcome="limited",scope="job_token_failure"}`); got != 2 {
		t.Errorf("job_token_failure 429s counted %v, want 2", got)
	}
	wantJob(t, p.warm.Job(t, p.project, job.ID), stWaiting, "")
	// The job's own budget is whole: the ack and perJob-1 keep-alives, then 429.
	codes = nil
	for i := 0; i < perJob+1; i++ {
		got, _ := put(t, p.cold.URL, job.ID, job.Token, stateBody(job.Token, stRunning))
		codes = append(codes, got.code)
	}
	if fmt.Sprint(codes) != "[200 200 200 200 200 429]" {
		t.Errorf("the runner's ack and keep-alives on the cold replica got %v, want %d×200 (the ack counted) then 429", codes, perJob)
	}
	wantJob(t, p.warm.Job(t, p.project, job.ID), stRunning, "")
}

// TestColdAcksRaceSweeper: builds whose ack keys expired get acks from two replicas that
// never saw them while the sweeper times them out. Each build ends exactly one way: acked
// (running; both runners' PUTs answered 200 running, the second being a keep-alive) or timed
// out (failed with runner_provisioning_timeout and retried once; both PUTs 403 failed).
func TestColdAcksRaceSweeper(t *testing.T) {
	t.Parallel()
	const (
		ttl    = 300 * time.Millisecond
		builds = 16
	)
	p := newColdPair(t, func(c *server.Config) { c.AckTTL = ttl })
	other := p.warm.Replica(t, jobapitest.Options{})
	_, jobs := p.assign(t, builds)
	time.Sleep(ttl + 50*time.Millisecond)
	type reply struct{ a, b answer }
	replies := make([]reply, builds)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, job := range jobs {
		for k, inst := range []*jobapitest.Instance{p.cold, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				got, _ := put(t, inst.URL, job.ID, job.Token, stateBody(job.Token, stRunning))
				if k == 0 {
					replies[i].a = got
				} else {
					replies[i].b = got
				}
			}()
		}
	}
	var rep any
	var sweepErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		time.Sleep(10 * time.Millisecond)
		rep, sweepErr = p.warm.Sweeper.SweepOnce(context.Background())
	}()
	close(start)
	wg.Wait()
	if sweepErr != nil {
		t.Fatal(sweepErr)
	}
	acked, timedOut := 0, 0
	for i, job := range jobs {
		j := p.warm.Job(t, p.project, job.ID)
		ev := p.warm.Events(t, p.project, job.ID)
		nAck, nTimeout := len(jobapitest.EventsOf(ev, "acknowledged")), len(jobapitest.EventsOf(ev, "ack_timeout"))
		r := replies[i]
		switch {
		case nAck == 1 && nTimeout == 0:
			acked++
			wantJob(t, j, stRunning, "")
			if want := (answer{200, stRunning, `{"status":"running"}`}); r.a != want || r.b != want {
				t.Errorf("build %d acked: PUTs answered %v and %v, want both %v", job.ID, r.a, r.b, want)
			}
			if j.RetriedBy != nil {
				t.Errorf("build %d acked and retried by %d", job.ID, *j.RetriedBy)
			}
		case nAck == 0 && nTimeout == 1:
			timedOut++
			wantJob(t, j, stFailed, provisioningTimeout)
			want := answer{403, stFailed, `{"message":"403 Forbidden - job is not processing on runner (status failed)"}`}
			if r.a != want || r.b != want {
				t.Errorf("build %d timed out: PUTs answered %v and %v, want both %v", job.ID, r.a, r.b, want)
			}
			if j.RetriedBy == nil {
				t.Errorf("build %d timed out and not retried", job.ID)
			} else if retry := p.warm.Job(t, p.project, *j.RetriedBy); retry.Status != stPending || retry.Attempt != 2 {
				t.Errorf("retry of build %d: %s attempt %d, want pending attempt 2", job.ID, retry.Status, retry.Attempt)
			}
		default:
			t.Errorf("build %d: %d acknowledged and %d ack_timeout events (%s), status %s; want exactly one of them",
				job.ID, nAck, nTimeout, jobapitest.EventTypes(ev), j.Status)
		}
	}
	t.Logf("%d builds acked, %d timed out by the sweep racing them (%+v)", acked, timedOut, rep)
}
