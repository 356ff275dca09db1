package polltest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestLongPollVersionExpiry: the queue version expires after a minute without bumps (the
// net under a lost bump), and the replica that makes the next one announces it like a
// bump: held requests are counted and only who can take a build is woken, where an
// unannounced version woke every held request (the whole fleet once a minute). Four
// runners for tag a wait; a build for a becomes pending behind the feed's back (a bump that
// was lost); the version key then expires: one runner takes the build, the three others are
// never answered 204.
func TestLongPollVersionExpiry(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pollers []*jobapitest.Poller
	for i := range 4 {
		_, token := inst.CreateRunner(t, "a")
		r := jobapitest.NewRunner(t, held.URL, token, fmt.Sprintf("s_exp%d", i))
		r.NoJob(t)
		pollers = append(pollers, jobapitest.StartPoller(t, ctx, r))
	}
	held.WaitHeld(t, 4)
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "lost-bump", "stage": "test", "script": "x", "tags": []string{"never"}})
	held.WaitHeld(t, 4)
	if _, err := inst.Pool.Exec(ctx, `UPDATE builds SET tags = '{a}' WHERE id = $1`, p.Jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := inst.Redis.Del(ctx, inst.Config.RedisKeyPrefix+"queue:version").Err(); err != nil {
		t.Fatal(err)
	}
	jobapitest.FirstHandout(t, ctx, pollers, p.Jobs[0].ID, "the build behind the lost bump was not handed out after the version expired")
	held.WaitHeld(t, 3)
	for i, pl := range pollers {
		if n := pl.NoJobs.Load(); n != 0 {
			t.Errorf("runner %d was answered 204 %d times after the version expired: woken for nothing", i, n)
		}
	}
}
