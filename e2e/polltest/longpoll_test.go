package polltest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// The long poll across replicas (jobapitest.LongPollReplica tells how): jobs are created
// through one replica, the runners' requests are held by others.

func takenWithin(t *testing.T, p *jobapitest.Poller, d time.Duration) int64 {
	t.Helper()
	select {
	case id := <-p.Got:
		return id
	case <-time.After(d):
		t.Fatalf("no job within %s (the hold lasts %s: the runner was not woken)", d, jobapitest.LongPollHold)
		return 0
	}
}

// TestLongPollWakesOnlyWhoCanTakeIt: four runners for tag a and four for tag b wait on one
// replica; a job for a wakes exactly one runner (it takes the job), and no b runner is sent
// to Postgres for it: no held request came back with a 204.
func TestLongPollWakesOnlyWhoCanTakeIt(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pollers []*jobapitest.Poller
	for i := range 8 {
		tag := "a"
		if i >= 4 {
			tag = "b"
		}
		_, token := inst.CreateRunner(t, tag)
		r := jobapitest.NewRunner(t, held.URL, token, fmt.Sprintf("s_lp%d", i))
		r.NoJob(t) // a fresh runner's first request goes to Postgres; the next one is held
		pollers = append(pollers, jobapitest.StartPoller(t, ctx, r))
	}
	held.WaitHeld(t, 8)
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "for-a", "stage": "test", "script": "x", "tags": []string{"a"}})
	jobapitest.FirstHandout(t, ctx, pollers, p.Jobs[0].ID, "the job for a was not handed out: no a runner was woken")
	// The seven others wait on: had they been woken, each would have come back with a 204
	// before asking again (the count below is final once all seven are held again).
	held.WaitHeld(t, 7)
	for i, pl := range pollers {
		if n := pl.NoJobs.Load(); n != 0 {
			t.Errorf("runner %d (tag %s) was answered 204 %d times after the job for a: woken for nothing", i, map[bool]string{true: "a", false: "b"}[i < 4], n)
		}
	}
}

// TestLongPollWakesRetaggedRunner: a job for tag c waits; the one runner held (tagged b)
// is retagged to c through another replica: the change names the runner, so the replica
// holding it drops its cached copy and wakes it, and it takes the job.
func TestLongPollWakesRetaggedRunner(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "for-c", "stage": "test", "script": "x", "tags": []string{"c"}})
	id, token := inst.CreateRunner(t, "b")
	r := jobapitest.NewRunner(t, held.URL, token, "s_retag")
	r.NoJob(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pl := jobapitest.StartPoller(t, ctx, r)
	held.WaitHeld(t, 1)
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/runners/%d", id), map[string]any{"tag_list": []string{"c"}}, nil)
	if got := takenWithin(t, pl, 20*time.Second); got != p.Jobs[0].ID {
		t.Fatalf("got job %d, want %d", got, p.Jobs[0].ID)
	}
}

// TestLongPollUnannouncedBump: a bump no announcement tells of (a replica of an older
// release only SETs the version) still wakes the held requests: the version read under the
// subscription sees it. The build is written straight into Postgres, as such a replica's
// would be, and the version set in Redis by hand.
func TestLongPollUnannouncedBump(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	r := held.NewRunner(t)
	r.NoJob(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pl := jobapitest.StartPoller(t, ctx, r)
	held.WaitHeld(t, 1)
	// A pipeline created through the API, then hidden from the long poll: its build is set
	// back to created, and made pending again behind the feed's back.
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "quiet", "stage": "test", "script": "x", "tags": []string{"never"}})
	held.WaitHeld(t, 1)
	if _, err := inst.Pool.Exec(ctx, `UPDATE builds SET tags = '{}' WHERE id = $1`, p.Jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := inst.Redis.Set(ctx, inst.Config.RedisKeyPrefix+"queue:version", "unannounced-"+time.Now().String(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got := takenWithin(t, pl, 20*time.Second); got != p.Jobs[0].ID {
		t.Fatalf("got job %d, want %d", got, p.Jobs[0].ID)
	}
}

// TestLongPollNoMissedWakeup: 12 runners of 4 profiles (tags a, b, c, untagged), held by
// two replicas, and 40 jobs (10 per profile) created at once from four goroutines through
// a third: every job is handed out, none twice, within a fraction of the hold. A wake-up
// lost between a count and a held request would leave a job waiting for the hold's end.
func TestLongPollNoMissedWakeup(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	replicas := []*jobapitest.Instance{inst.LongPollReplica(t), inst.LongPollReplica(t)}
	profiles := [][]string{{"a"}, {"b"}, {"c"}, nil}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		taken = map[int64]int{}
		wg    sync.WaitGroup
	)
	for i := range 12 {
		_, token := inst.CreateRunner(t, profiles[i%4]...)
		r := jobapitest.NewRunner(t, replicas[i%2].URL, token, fmt.Sprintf("s_nm%d", i))
		r.NoJob(t)
		wg.Go(func() { pollAndFinish(ctx, t, r, 0, &mu, taken) })
	}
	replicas[0].WaitHeld(t, 6)
	replicas[1].WaitHeld(t, 6)
	want := map[int64]bool{}
	var cwg sync.WaitGroup
	for _, tags := range profiles {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for k := range 10 {
				job := jobapitest.Job{"name": fmt.Sprintf("job-%v-%d", tags, k), "stage": "test", "script": "x"}
				if tags != nil {
					job["tags"] = tags
				}
				p := inst.CreatePipeline(t, 1, []string{"test"}, job)
				mu.Lock()
				want[p.Jobs[0].ID] = true
				mu.Unlock()
			}
		}()
	}
	cwg.Wait()
	deadline := time.Now().Add(jobapitest.LongPollHold / 2)
	for {
		mu.Lock()
		n := len(taken)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs handed out within %s: a wake-up was missed", n, len(want), jobapitest.LongPollHold/2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for id, n := range taken {
		if !want[id] {
			t.Errorf("job %d handed out, not one of the created", id)
		}
		if n != 1 {
			t.Errorf("job %d handed out %d times", id, n)
		}
	}
}

// TestPollAfterBumpNeverHidesABuild: runners polling (no long poll) two replicas as fast
// as they can, of two profiles, while a third replica creates jobs for each and for a tag
// nobody has (bumps after which a profile has nothing): a replica answers a poll after a
// bump from its record of profiles found empty at that version, and must never hide a job
// past the next version change: every job is handed out, none twice.
func TestPollAfterBumpNeverHidesABuild(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	replicas := []*jobapitest.Instance{inst.Replica(t, jobapitest.Options{}), inst.Replica(t, jobapitest.Options{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		taken = map[int64]int{}
		wg    sync.WaitGroup
	)
	profiles := [][]string{{"a"}, nil}
	for i := range 8 {
		_, token := inst.CreateRunner(t, profiles[i%2]...)
		r := jobapitest.NewRunner(t, replicas[i%2].URL, token, fmt.Sprintf("s_pb%d", i))
		wg.Go(func() { pollAndFinish(ctx, t, r, 2*time.Millisecond, &mu, taken) })
	}
	want := map[int64]bool{}
	for k := range 30 {
		job := jobapitest.Job{"name": fmt.Sprintf("job-%d", k), "stage": "test", "script": "x"}
		switch k % 3 {
		case 0:
			job["tags"] = []string{"a"}
		case 2:
			job["tags"] = []string{"nobody"}
		}
		p := inst.CreatePipeline(t, 1, []string{"test"}, job)
		if k%3 != 2 {
			want[p.Jobs[0].ID] = true
		}
		time.Sleep(time.Duration(k%4) * 5 * time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(taken)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs handed out within 30s: a poll was answered from a stale record", n, len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for id, n := range taken {
		if !want[id] || n != 1 {
			t.Errorf("job %d handed out %d times (one of the created: %v)", id, n, want[id])
		}
	}
}

// pollAndFinish plays one runner until ctx ends: it asks for jobs, counts each one it is
// handed in taken (under mu) and finishes it, pausing between requests; anything but a job
// or a 204 fails the test.
func pollAndFinish(ctx context.Context, t *testing.T, r *jobapitest.Runner, pause time.Duration, mu *sync.Mutex, taken map[int64]int) {
	pollAndFinishAsking(ctx, t, r, pause, mu, taken, false)
}

// pollAndFinishAsking is pollAndFinish; with retry5xx a 5xx (the server's backends coming
// back) is asked again instead of failing the test.
func pollAndFinishAsking(ctx context.Context, t *testing.T, r *jobapitest.Runner, pause time.Duration, mu *sync.Mutex, taken map[int64]int, retry5xx bool) {
	for ctx.Err() == nil {
		job, res, err := r.RequestJob(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			t.Errorf("request job: %v", err)
			return
		case job != nil:
			mu.Lock()
			taken[job.ID]++
			mu.Unlock()
			r.Finish(t, job, "success", "")
		case res.Code != http.StatusNoContent && (!retry5xx || res.Code < 500):
			t.Errorf("request job: %d %s", res.Code, res.Message)
			return
		}
		time.Sleep(pause)
	}
}
