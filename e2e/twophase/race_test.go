package twophase_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// What a runner does with a job it was given.
type plan int

const (
	planAck       plan = iota // ack at once, then finish
	planNever                 // never ack: the VM never booted
	planLate                  // ack after about the TTL: races the sweepers
	planDecline               // state=failed instead of the ack
	planKeepalive             // keep-alive, then ack, all within the TTL
	planLegacy                // runner without two_phase_job_commit
)

var planNames = [...]string{"ack", "never", "late", "decline", "keepalive", "legacy"}

// reply is one PUT answer as the runner saw it.
type reply struct {
	sent   bool
	code   int
	status string
}

// assignment is one 201 and what its runner got for its two-phase step.
type assignment struct {
	id      int64
	manager string
	plan    plan
	step    reply // the ack (or the decline, for planDecline)
	keep    reply // planKeepalive's keep-alive
	final   reply
}

// recorder collects what the runners saw; everything is checked after the run.
type recorder struct {
	mu       sync.Mutex
	assigned []*assignment
	codes    map[int]int // job request answers
	problems []string
}

func (r *recorder) add(a *assignment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.assigned = append(r.assigned, a)
}

func (r *recorder) code(c int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.codes[c]++
}

func (r *recorder) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < 30 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// set records one PUT answer into dst under the lock (late acks finish after their worker moved on).
func (r *recorder) set(dst *reply, res runnerclient.UpdateResult, err error) reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	*dst = reply{sent: true, code: res.Code, status: res.JobStatus}
	if err != nil {
		dst.code = -1
	}
	return *dst
}

// TestConcurrentRunnersKeepInvariants: 20 runner goroutines (4 runner tokens, 10 managers)
// on three replicas take ~200 builds; some ack, some never do, some ack late against two
// background sweepers, some decline. Afterwards SPEC §11 invariants 1–4 are checked from
// Postgres and against every answer the runners got.
func TestConcurrentRunnersKeepInvariants(t *testing.T) {
	// Not parallel: the heaviest test runs alone, so its timings mean something.
	const (
		ttl      = time.Second
		interval = 100 * time.Millisecond
		workers  = 20
		pipes    = 20
		perPipe  = 10
		retryMax = 2
		hardStop = 25 * time.Second
		// Under -race, 20 runners and three replicas keep 2 CPUs busy: a sweep batch then takes
		// up to ~2 s (more on a shared host), and the next sweep starts that much later
		// (measured; see the log). The quiet-machine bound is TestAckTimeoutRetriesOnce's.
		loadSlack = 4 * time.Second
	)
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.AckTTL, c.SweepInterval, c.AutoRetryMax, c.DatabaseMaxConns = ttl, interval, retryMax, 16
	}})
	enableFlag(t, inst, 1, 2)
	replicas := []*jobapitest.Instance{inst, inst.Replica(t, jobapitest.Options{Sweeper: true}), inst.Replica(t, jobapitest.Options{})}
	inst.WaitFlags(t)

	var tokens []string
	for range 4 {
		tokens = append(tokens, runnerToken(t, inst))
	}
	var originals int
	for i := range pipes {
		jobs := make([]jobapitest.Job, perPipe)
		for j := range jobs {
			jobs[j] = jobDef(fmt.Sprintf("job-%d-%d", i, j))
		}
		inst.CreatePipeline(t, int64(1+i%2), []string{"test"}, jobs...)
		originals += perPipe
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rec := &recorder{codes: map[int]int{}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var workersWG, lateWG sync.WaitGroup
	start := time.Now()
	for w := range workers {
		token := tokens[w%len(tokens)]
		manager := fmt.Sprintf("s_race%02d", w/2) // two workers per manager, like concurrent = 2
		legacy := w >= workers-2                  // one manager (two workers) of an older runner
		home := newRunner(t, replicas[w%len(replicas)].URL, token, manager, !legacy)
		var upd []*jobapitest.Runner // PUTs go through any replica, as behind a load balancer
		for _, r := range replicas {
			upd = append(upd, newRunner(t, r.URL, token, manager, !legacy))
		}
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			put := func(dst *reply, job *runnerclient.Job, state string, opts runnerclient.UpdateOptions) reply {
				// The package-level source: late acks call this from goroutines of their own.
				res, err := upd[rand.IntN(len(upd))].UpdateJob(context.Background(), job, state, opts)
				if err != nil {
					rec.problem("PUT job %d state=%s: %v", job.ID, state, err)
				}
				return rec.set(dst, res, err)
			}
			finish := func(a *assignment, job *runnerclient.Job) {
				put(&a.final, job, stSuccess, runnerclient.UpdateOptions{Checksum: "crc32:00000000"})
			}
			for ctx.Err() == nil {
				job, res, err := home.RequestJob(ctx)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					rec.problem("request job: %v", err)
					return
				}
				rec.code(res.Code)
				if res.Code != http.StatusCreated {
					if res.Code != http.StatusNoContent {
						rec.problem("request job: %d %s", res.Code, res.Message)
					}
					// gitlab-runner polls every 3 s; a tenth of that keeps the run short.
					time.Sleep(time.Duration(200+rng.IntN(200)) * time.Millisecond)
					continue
				}
				a := &assignment{id: job.ID, manager: manager}
				switch p := rng.IntN(100); {
				case legacy:
					a.plan = planLegacy
				case p < 45:
					a.plan = planAck
				case p < 65:
					a.plan = planNever
				case p < 80:
					a.plan = planLate
				case p < 90:
					a.plan = planDecline
				default:
					a.plan = planKeepalive
				}
				rec.add(a)
				switch a.plan {
				case planAck, planLegacy:
					if put(&a.step, job, stRunning, runnerclient.UpdateOptions{}).code == http.StatusOK {
						finish(a, job)
					}
				case planDecline:
					put(&a.step, job, stFailed, runnerclient.UpdateOptions{FailureReason: "runner_system_failure"})
				case planLate, planKeepalive:
					wait := ttl + time.Duration(rng.IntN(500))*time.Millisecond
					if a.plan == planKeepalive {
						wait = ttl * 4 / 10
					}
					lateWG.Add(1)
					go func() {
						defer lateWG.Done()
						time.Sleep(wait)
						if a.plan == planKeepalive {
							put(&a.keep, job, stPending, runnerclient.UpdateOptions{})
							time.Sleep(wait)
						}
						if put(&a.step, job, stRunning, runnerclient.UpdateOptions{}).code == http.StatusOK {
							finish(a, job)
						}
					}()
				}
			}
		}()
	}

	// Run until nothing is pending or waiting any more (every chain ended), or hardStop.
	for {
		var pending, waiting int
		if err := inst.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status = 'pending'),
			count(*) FILTER (WHERE status = 'waiting_for_runner_ack') FROM builds`).Scan(&pending, &waiting); err != nil {
			t.Fatal(err)
		}
		if pending == 0 && waiting == 0 {
			break
		}
		if time.Since(start) > hardStop {
			t.Logf("stopping the runners with %d pending and %d waiting builds", pending, waiting)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	workersWG.Wait()
	lateWG.Wait()
	runFor := time.Since(start)
	// Whatever still waits must be timed out by the sweepers.
	deadline := time.Now().Add(ttl + interval + loadSlack)
	for {
		var waiting int
		if err := inst.Pool.QueryRow(context.Background(), `SELECT count(*) FROM builds WHERE status = 'waiting_for_runner_ack'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d builds still waiting %v after the runners stopped", waiting, ttl+interval+loadSlack)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range rec.problems {
		t.Error(p)
	}

	st := loadState(t, inst)
	checkInvariants(t, st, rec, originals, ttl, ttl+interval+loadSlack, retryMax)

	// Every acknowledgement the replicas counted in jobapi_assign_to_ack_seconds is one in
	// Postgres: an ack that lost the row to a sweeper is not an acknowledgement.
	var counted float64
	for _, r := range replicas {
		counted += r.Metric(t, "jobapi_assign_to_ack_seconds_count")
	}
	var recorded int
	for _, b := range st.builds {
		recorded += len(b.events["acknowledged"])
	}
	if int(counted) != recorded {
		t.Errorf("replicas counted %v acknowledgements, Postgres has %d", counted, recorded)
	}

	// Timings and sweep cost.
	var sweeps, sweepSum float64
	for _, r := range replicas[:2] {
		sweeps += r.Metric(t, "jobapi_ack_sweep_duration_seconds_count")
		sweepSum += r.Metric(t, "jobapi_ack_sweep_duration_seconds_sum")
	}
	rep, err := inst.Sweeper.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run %v: %d builds in %d chains, job requests %v", runFor.Round(time.Millisecond), len(st.builds), originals, rec.codes)
	t.Logf("background sweeps on 2 replicas: %.0f, mean %.2f ms; a sweep with nothing expired among %d builds: %v",
		sweeps, sweepSum/sweeps*1000, len(st.builds), rep.Duration)
}

// build is one row of builds with its events, for the invariant checks.
type build struct {
	id, retryOf, retriedBy   int64
	attempt                  int
	status, reason, manager  string
	twoPhase                 bool
	assignedAt, queuedAt     *time.Time
	events                   map[string][]event
	assignedTwoPhase         bool
	acknowledgedAfterSeconds float64
}

type event struct {
	at     time.Time
	detail map[string]any
}

type state struct {
	builds map[int64]*build
	order  []int64
}

func loadState(t *testing.T, inst *jobapitest.Instance) *state {
	t.Helper()
	ctx := context.Background()
	st := &state{builds: map[int64]*build{}}
	rows, err := inst.Pool.Query(ctx, `SELECT b.id, COALESCE(b.retry_of, 0), COALESCE(b.retried_by, 0), b.attempt, b.status,
		COALESCE(b.failure_reason, ''), COALESCE(m.system_id, ''), b.two_phase, b.assigned_at, b.queued_at
		FROM builds b LEFT JOIN runner_managers m ON m.id = b.runner_manager_id ORDER BY b.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		b := &build{events: map[string][]event{}}
		if err := rows.Scan(&b.id, &b.retryOf, &b.retriedBy, &b.attempt, &b.status, &b.reason, &b.manager, &b.twoPhase,
			&b.assignedAt, &b.queuedAt); err != nil {
			t.Fatal(err)
		}
		st.builds[b.id] = b
		st.order = append(st.order, b.id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = inst.Pool.Query(ctx, `SELECT build_id, type, at, detail FROM build_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var typ string
		var e event
		if err := rows.Scan(&id, &typ, &e.at, &e.detail); err != nil {
			t.Fatal(err)
		}
		b := st.builds[id]
		b.events[typ] = append(b.events[typ], e)
		if typ == "assigned" && e.detail["two_phase"] == true {
			b.assignedTwoPhase = true
		}
		if typ == "acknowledged" {
			b.acknowledgedAfterSeconds, _ = e.detail["assign_to_ack_seconds"].(float64)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}

// checkInvariants checks SPEC §11 1–4 against Postgres and what the runners saw.
func checkInvariants(t *testing.T, st *state, rec *recorder, originals int, ttl, maxTimeout time.Duration, retryMax int) {
	t.Helper()
	fail := t.Errorf
	n := func(b *build, typ string) int { return len(b.events[typ]) }

	// Invariant 1: one 201 and one manager per build; no build reaches running twice.
	handed := map[int64]*assignment{}
	perPlan := map[plan]int{}
	for _, a := range rec.assigned {
		if prev, dup := handed[a.id]; dup {
			fail("job %d handed out twice: to %s and to %s", a.id, prev.manager, a.manager)
		}
		handed[a.id] = a
		perPlan[a.plan]++
	}
	var latest, timeouts, lateWon, lateFenced, acks int
	var ackLatencies, timeoutLatencies, pickup []time.Duration
	statuses := map[string]int{}
	for _, id := range st.order {
		b := st.builds[id]
		statuses[b.status]++
		a := handed[id]
		if got := n(b, "assigned"); got > 1 || (got == 1) != (a != nil) {
			fail("build %d: %d assigned events, handed out in a 201: %v", id, got, a != nil)
			continue
		}
		if a != nil && b.manager != a.manager {
			fail("build %d: assigned to manager %q in Postgres, handed to %q", id, b.manager, a.manager)
		}
		legacyRun := 0
		if a != nil && !b.assignedTwoPhase {
			legacyRun = 1
		}
		if runs := n(b, "acknowledged") + legacyRun; runs > 1 {
			fail("build %d reached running %d times", id, runs)
		}
		if n(b, "acknowledged") > 0 && n(b, "ack_timeout")+n(b, "declined") > 0 {
			fail("build %d acknowledged and also timed out or declined", id)
		}
		if n(b, "ack_timeout") > 1 || n(b, "retried") > 1 {
			fail("build %d: %d ack_timeout, %d retried events", id, n(b, "ack_timeout"), n(b, "retried"))
		}
		if a != nil && (a.plan == planLegacy) == b.assignedTwoPhase {
			fail("build %d: two-phase %v for a %s runner", id, b.assignedTwoPhase, planNames[a.plan])
		}

		// Invariant 2: assigned, never acknowledged nor declined → timed out, retried once
		// while the limit allows.
		if a != nil && b.assignedTwoPhase && n(b, "acknowledged") == 0 && n(b, "declined") == 0 {
			if b.status != stFailed || b.reason != provisioningTimeout || n(b, "ack_timeout") != 1 {
				fail("build %d never acknowledged: %s/%s with %d ack_timeout events", id, b.status, b.reason, n(b, "ack_timeout"))
				continue
			}
			timeouts++
			took := b.events["ack_timeout"][0].at.Sub(*b.assignedAt)
			timeoutLatencies = append(timeoutLatencies, took)
			if took < ttl || took > maxTimeout {
				fail("build %d timed out %v after assignment, want in [%v, %v]", id, took, ttl, maxTimeout)
			}
		}
		if b.status == stFailed && (b.reason == provisioningTimeout || n(b, "declined") == 1) {
			if b.attempt-1 < retryMax {
				r := st.builds[b.retriedBy]
				if r == nil || r.retryOf != id || r.attempt != b.attempt+1 || n(b, "retried") != 1 {
					fail("build %d (attempt %d, %s) not retried exactly once: retried_by %d", id, b.attempt, b.reason, b.retriedBy)
				} else if r.assignedAt != nil {
					pickup = append(pickup, r.assignedAt.Sub(*r.queuedAt))
				}
			} else if b.retriedBy != 0 || n(b, "retry_exhausted") != 1 {
				fail("build %d: attempt %d of %d failed with %s, retried_by %d, %d retry_exhausted events",
					id, b.attempt, retryMax+1, b.reason, b.retriedBy, n(b, "retry_exhausted"))
			}
		}

		// Invariant 3: what the runner was told agrees with the row; a timed-out build's
		// runner only ever got 403 + Job-Status failed.
		if a != nil && a.step.sent {
			switch {
			case a.step.code == http.StatusOK && a.plan == planDecline:
				if n(b, "declined") != 1 || a.step.status != stFailed {
					fail("build %d: decline answered 200 %q, but %d declined events", id, a.step.status, n(b, "declined"))
				}
			case a.step.code == http.StatusOK:
				if a.step.status != stRunning || n(b, "acknowledged")+legacyRun != 1 {
					fail("build %d: ack answered 200 %q, but the build was not acknowledged (%s/%s)", id, a.step.status, b.status, b.reason)
				}
				acks++
				if a.plan == planLate {
					lateWon++
				}
				if a.plan == planAck {
					ackLatencies = append(ackLatencies, time.Duration(b.acknowledgedAfterSeconds*float64(time.Second)))
				}
			case a.step.code == http.StatusForbidden && a.step.status == stFailed:
				if n(b, "ack_timeout") != 1 || n(b, "acknowledged") != 0 {
					fail("build %d: %s answered 403 failed, but it did not time out", id, planNames[a.plan])
				}
				if a.plan == planLate {
					lateFenced++
				}
			default:
				fail("build %d: %s answered %d Job-Status %q", id, planNames[a.plan], a.step.code, a.step.status)
			}
		}
		if a != nil && n(b, "ack_timeout") == 1 && a.step.sent && a.step.code/100 == 2 {
			fail("build %d timed out, yet its runner's %s got %d", id, planNames[a.plan], a.step.code)
		}
		if a != nil && a.keep.sent && !(a.keep.code == http.StatusOK && a.keep.status == stWaiting ||
			a.keep.code == http.StatusForbidden && a.keep.status == stFailed) {
			fail("build %d: keep-alive answered %d %q", id, a.keep.code, a.keep.status)
		}
		if a != nil && a.final.sent && (a.final.code != http.StatusOK || a.final.status != stSuccess) {
			fail("build %d: final update answered %d %q", id, a.final.code, a.final.status)
		}

		// Invariant 4: every build ends terminal, or is legitimately pending (a retry not yet
		// taken when the runners stopped). Nothing is left waiting or running: the runners
		// finished every job they acked and the sweepers timed out the rest.
		switch b.status {
		case stSuccess, stFailed:
		case stPending:
			if b.retriedBy != 0 || b.assignedAt != nil {
				fail("build %d pending but assigned or retried", id)
			}
		default:
			fail("build %d ended %s", id, b.status)
		}
		if b.retriedBy == 0 {
			latest++
		}
	}
	if latest != originals {
		fail("%d latest attempts for %d jobs: a chain was lost or forked", latest, originals)
	}
	if len(handed) != len(rec.assigned) || timeouts == 0 || lateWon+lateFenced == 0 || acks == 0 {
		fail("run too thin to mean anything: %d assignments, %d timeouts, %d late acks, %d acks", len(rec.assigned), timeouts, lateWon+lateFenced, acks)
	}
	plans := map[string]int{}
	for p, c := range perPlan {
		plans[planNames[p]] = c
	}
	t.Logf("%d assignments by plan %v; final statuses %v", len(rec.assigned), plans, statuses)
	t.Logf("late acks: %d won the row, %d fenced with 403 failed", lateWon, lateFenced)
	t.Logf("assign→ack (immediate acks, server clock): %s", spread(ackLatencies))
	t.Logf("assign→timed out = assign→retry queued (%d timeouts): %s", timeouts, spread(timeoutLatencies))
	t.Logf("retry queued→assigned again: %s", spread(pickup))
}

// spread summarises durations as min/median/p95/max.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(f float64) time.Duration { return s[int(f*float64(len(s)-1))].Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%d min %v median %v p95 %v max %v", len(s), q(0), q(0.5), q(0.95), q(1))
}
