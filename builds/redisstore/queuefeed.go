package redisstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds"
)

var _ builds.QueueFeed = (*Store)(nil)

func (s *Store) queueChannel() string { return s.prefix + "queue-bumps" }

// bumpScript sets the version and publishes it in one step (a script rather than MULTI:
// on a Redis Cluster the key and the keyless PUBLISH would be split across nodes), so that a
// replica that hears of a version knows it is about this bump.
var bumpScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1`)

// BumpAnnounced sets a new queue version and announces it; a runner change names the
// runner ("<version> <runner id>").
func (s *Store) BumpAnnounced(ctx context.Context, runnerID int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	v := newVersion()
	msg := v
	if runnerID != 0 {
		msg += " " + strconv.FormatInt(runnerID, 10)
	}
	err := bumpScript.Run(ctx, s.rdb, []string{s.versionKey()}, v, versionTTL.Milliseconds(), s.queueChannel(), msg).Err()
	return unavailable(err)
}

// SubscribeQueue delivers every announced bump until ctx ends or the connection fails (then
// it returns the error: the caller must assume it missed bumps).
func (s *Store) SubscribeQueue(ctx context.Context, ready func(), fn func(version string, runnerID int64)) error {
	return s.receive(ctx, "queue bumps", []string{s.queueChannel()}, ready, func(m *redis.Message) {
		v, runner, _ := strings.Cut(m.Payload, " ")
		id, _ := strconv.ParseInt(runner, 10, 64)
		if v != "" {
			fn(v, id)
		}
	})
}
