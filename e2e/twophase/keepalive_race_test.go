package twophase_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/retry"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// A keep-alive (PUT state=pending) and the ack sweeper race for one waiting build; the
// interleaving is held by construction, not by timing, both ways round. Whichever commits
// first wins in Postgres and the other sees it (the bug: a keep-alive answered 200 after
// the sweeper had failed the build, its event recorded after ack_timeout).

// slowTTLs is the sweeper's Redis with a slow answer: TTLs reads the ack keys at once, then
// holds the answer until release is closed. The sweeper has then locked its candidates
// (FOR UPDATE) and learnt that their keys expired, and commits only when the test says.
type slowTTLs struct {
	builds.Leases
	read    chan struct{} // closed when the keys have been read
	release chan struct{}
	once    sync.Once
}

func (s *slowTTLs) TTLs(ctx context.Context, ids []int64) (map[int64]time.Duration, error) {
	ttls, err := s.Leases.TTLs(ctx, ids)
	s.once.Do(func() { close(s.read) })
	select {
	case <-s.release:
		return ttls, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// driven is a sweeper over inst's store and Redis that the test runs itself, with leases
// (inst's, or a slow wrapper of them) and a clock of its own (nil: the real one).
func driven(inst *jobapitest.Instance, leases builds.Leases, now func() time.Time) *retry.Sweeper {
	s := inst.Sweeper
	return &retry.Sweeper{Store: s.Store, Leases: leases, Queue: s.Queue, Policy: s.Policy,
		MaxWait: s.MaxWait, Now: now, Log: slog.New(slog.DiscardHandler)}
}

// lockWaiters counts the backends of inst's database waiting for a row lock held by pid
// (0: held by anyone).
func lockWaiters(t testing.TB, inst *jobapitest.Instance, pid int) int {
	return jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND CASE WHEN $1 = 0 THEN cardinality(pg_blocking_pids(pid)) > 0 ELSE $1 = ANY(pg_blocking_pids(pid)) END`, pid)
}

// keepaliveRace sets up one waiting build of a two-phase runner on a replica with ack TTL
// ttl and no background sweeper.
func keepaliveRace(t *testing.T, ttl time.Duration) (*jobapitest.Instance, *jobapitest.Runner, *runnerclient.Job) {
	t.Helper()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.AckTTL = ttl }})
	enableFlag(t, inst, 1)
	inst.WaitFlags(t)
	r := newRunner(t, inst.URL, runnerToken(t, inst), "s_keepalive", true)
	inst.CreatePipeline(t, 1, []string{"test"}, jobDef("a"))
	return inst, r, take(t, r)
}

// putAsync sends the keep-alive from a goroutine: it is expected to wait for a row lock.
func putAsync(r *jobapitest.Runner, job *runnerclient.Job) <-chan runnerclient.UpdateResult {
	done := make(chan runnerclient.UpdateResult, 1)
	go func() {
		res, err := r.UpdateJob(context.Background(), job, stPending, runnerclient.UpdateOptions{})
		if err != nil {
			res.Code = -1
		}
		done <- res
	}()
	return done
}

// TestKeepaliveAfterSweeperFailIsFenced: the sweeper locked the build and found its ack key
// expired; a keep-alive arrives before the sweeper commits. The keep-alive waits for the
// row, then finds the build failed: 403 with Job-Status failed (gitlab-runner aborts), and
// no keepalive event in the history, which ends queued, assigned, ack_timeout, retried.
func TestKeepaliveAfterSweeperFailIsFenced(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	inst, r, job := keepaliveRace(t, ttl)
	// The key expires and the deadline of record passes; nothing sweeps yet.
	testenv.Eventually(t, 10*time.Second, "the ack key expired", func() bool { return ackKeyTTL(t, inst, job.ID) == -2 })
	time.Sleep(50 * time.Millisecond)

	slow := &slowTTLs{Leases: inst.Sweeper.Leases, read: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		select {
		case <-slow.release:
		default:
			close(slow.release) // a failed test lets the sweep end
		}
	}()
	type sweep struct {
		rep retry.Report
		err error
	}
	swept := make(chan sweep, 1)
	go func() {
		rep, err := driven(inst, slow, nil).SweepOnce(context.Background())
		swept <- sweep{rep, err}
	}()
	select {
	case <-slow.read:
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep did not read the ack key within 10 s")
	}
	// Inside the window: the sweeper holds the row and has decided; the keep-alive comes.
	kept := putAsync(r, job)
	testenv.Eventually(t, 10*time.Second, "the keep-alive waits for the sweeper's row lock",
		func() bool { return lockWaiters(t, inst, 0) > 0 })
	close(slow.release)

	s := <-swept
	if s.err != nil || s.rep.TimedOut != 1 {
		t.Fatalf("sweep: %+v, %v; want the build timed out", s.rep, s.err)
	}
	res := <-kept
	jobapitest.WantUpdate(t, "keep-alive after the sweeper failed the build", res, http.StatusForbidden, stFailed)
	timedOut(t, inst, 1, job.ID, true)
	ev := inst.Events(t, 1, job.ID)
	jobapitest.WantEvents(t, ev, "queued", "assigned", "ack_timeout", "retried")
}

// TestKeepaliveBeforeSweepHoldsDeadline: a keep-alive that takes the row first (the test
// holds the row while it waits, then lets it through) moves the deadline of record to
// keep-alive + TTL. Redis then loses the ack key (SPEC §11.5): a sweep just before that
// deadline leaves the build waiting, one just after fails it.
func TestKeepaliveBeforeSweepHoldsDeadline(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	inst, r, job := keepaliveRace(t, ttl)
	// The keep-alive comes a while after the assignment, so that the assignment's deadline
	// passes before the keep-alive's.
	time.Sleep(300 * time.Millisecond)

	ctx := context.Background()
	held, err := inst.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx)
	var pid int
	if err := held.QueryRow(ctx, `SELECT pg_backend_pid() FROM builds WHERE id = $1 FOR UPDATE`, job.ID).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	kept := putAsync(r, job)
	testenv.Eventually(t, 10*time.Second, "the keep-alive waits for the held row",
		func() bool { return lockWaiters(t, inst, pid) > 0 })
	// A sweep inside the window, its clock past the assignment's deadline, passes the
	// row by (SKIP LOCKED).
	past := time.Now().Add(ttl)
	if rep, err := driven(inst, inst.Sweeper.Leases, func() time.Time { return past }).SweepOnce(ctx); err != nil || rep.TimedOut != 0 {
		t.Fatalf("sweep while the row is held: %+v, %v; want nothing timed out", rep, err)
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-kept
	jobapitest.WantUpdate(t, "keep-alive", res, http.StatusOK, stWaiting)
	ka := oneEvent(t, inst.Events(t, 1, job.ID), "keepalive")

	// Redis loses the key: only the deadline of record speaks now.
	if err := inst.Redis.Del(ctx, fmt.Sprintf("%sack:{%d}", inst.Config.RedisKeyPrefix, job.ID)).Err(); err != nil {
		t.Fatal(err)
	}
	sweepAt := func(at time.Time) retry.Report {
		rep, err := driven(inst, inst.Sweeper.Leases, func() time.Time { return at }).SweepOnce(ctx)
		if err != nil {
			t.Fatalf("sweep at keep-alive %+v: %v", at.Sub(ka.At), err)
		}
		return rep
	}
	before := ka.At.Add(ttl - 10*time.Millisecond)
	if rep := sweepAt(before); rep.TimedOut != 0 {
		t.Fatalf("a sweep at keep-alive + %v failed the build (%+v): the keep-alive's deadline is keep-alive + %v", before.Sub(ka.At), rep, ttl)
	}
	wantJob(t, inst.Job(t, 1, job.ID), stWaiting, "")
	// The keep-alive bought TTL, not more: an abandoned build still fails right after it.
	after := ka.At.Add(ttl + 10*time.Millisecond)
	if rep := sweepAt(after); rep.TimedOut != 1 {
		t.Fatalf("a sweep at keep-alive + %v: %+v; want the build timed out", after.Sub(ka.At), rep)
	}
	timedOut(t, inst, 1, job.ID, true)
	jobapitest.WantEvents(t, inst.Events(t, 1, job.ID), "queued", "assigned", "keepalive", "ack_timeout", "retried")
}

// TestKeepaliveStatements: the keep-alive is its compare-and-set alone (deadline, state,
// token and event in one statement) on a replica that knows the build; one that never saw
// it first reads the build and its project once (the token's check for the rate limits,
// what its trace PATCHes will need) and then knows it.
func TestKeepaliveStatements(t *testing.T) {
	t.Parallel()
	p := newColdPair(t, func(c *server.Config) { c.AckTTL = 30 * time.Second })
	_, jobs := p.assign(t, 1)
	job := jobs[0]
	keepAlive := func(what string) []string {
		t.Helper()
		got, rid := put(t, p.cold.URL, job.ID, job.Token, stateBody(job.Token, stPending))
		if want := (answer{200, stWaiting, `{"status":"waiting_for_runner_ack"}`}); got != want {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		sqls := p.stmts.of(rid)
		if len(sqls) == 0 || !strings.Contains(sqls[len(sqls)-1], "UPDATE builds SET ack_deadline") {
			t.Fatalf("%s ran %q, want the keep-alive's compare-and-set last", what, sqls)
		}
		return sqls
	}
	for _, sql := range keepAlive("first keep-alive on a replica that never saw the build") {
		if !strings.HasPrefix(sql, "SELECT") && !strings.Contains(sql, "UPDATE builds SET ack_deadline") {
			t.Errorf("first keep-alive on the cold replica wrote %q besides its compare-and-set", sql)
		}
	}
	if sqls := keepAlive("second keep-alive"); len(sqls) != 1 {
		t.Errorf("second keep-alive ran %d statements, want the keep-alive's one: %q", len(sqls), sqls)
	}
	jobapitest.WantEvents(t, p.warm.Events(t, p.project, job.ID), "queued", "assigned", "keepalive", "keepalive")
}
