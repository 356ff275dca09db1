package pipelinetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// TestStageReleaseDuringRedisWritePause: the next stage is released while Redis refuses
// writes (CLIENT PAUSE WRITE: a failover or a blocked primary), so the queue version bump is
// lost and idle runners keep getting 204 from their cached version. The version must expire
// (SPEC §2: losing Redis data must never lose a build), after which the runner finds the job.
func TestStageReleaseDuringRedisWritePause(t *testing.T) {
	t.Parallel()
	rs := testenv.OwnRedis(t)
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.RedisURL = rs.URL }})
	r := inst.NewRunner(t)
	p := createPipeline(t, inst, 70, "", []string{"build", "test"},
		job{"name": "a", "stage": "build", "script": "x"},
		job{"name": "b", "stage": "test", "script": "x"})
	a := r.TakeNamed(t, "a")
	r.NoJob(t) // the runner now holds the current version
	opt, err := redis.ParseURL(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	const pause = 2500 * time.Millisecond
	paused := time.Now()
	if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	r.Finish(t, a, runnerclient.StateSuccess, "")
	expect(t, inst, p, "running", map[string]string{"a": "success", "b": "pending"})
	time.Sleep(time.Until(paused.Add(pause + 100*time.Millisecond)))

	key := inst.Config.RedisKeyPrefix + "queue:version"
	ttl, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("queue version %s has TTL %v (%v): a lost bump would hide pending builds from idle runners for good", key, ttl, err)
	}
	// Let the minute pass for Redis.
	if err := rdb.PExpire(context.Background(), key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	b := r.TakeNamed(t, "b")
	r.Finish(t, b, runnerclient.StateSuccess, "")
	expect(t, inst, p, "success", nil)
}
