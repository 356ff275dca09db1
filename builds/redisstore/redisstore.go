// Package redisstore keeps jobapi's hot, expiring state in Redis: the ack TTL key of each
// waiting build (builds.Leases) and the queue version that answers idle polls (builds.Queue).
// Redis is never the truth: every key here can vanish and the worst outcome is a waiting
// build timed out early or an idle runner querying Postgres once.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds"
)

// CallTimeout bounds every Redis call, so that a hung Redis costs a request at most this.
const CallTimeout = 500 * time.Millisecond

// Store implements builds.Leases and builds.Queue.
type Store struct {
	rdb redis.UniversalClient
	// hot sends the single commands of a busy fleet's request path (ack keys, trace
	// watches, pipeline events) through go-redis's autopipeliner: the commands of
	// concurrent requests share round trips, one write and one read for a whole batch
	// instead of per command, while each caller still waits for its own answer. The queue
	// version, read by every poll, goes straight: an idle fleet's polls are spread out,
	// each would be a batch of one, and the autopipeliner's hand-off cost an idle poll
	// about 40 µs more CPU than a plain GET (jobapi-bench idle).
	hot    redis.Cmdable
	prefix string
	// versions coalesces the version reads of concurrent job requests (versionreads.go).
	versions *versionReads
}

var (
	_ builds.Leases = (*Store)(nil)
	_ builds.Queue  = (*Store)(nil)
)

// New returns a Store whose keys all start with prefix (e.g. "jobapi:").
func New(rdb redis.UniversalClient, prefix string) *Store {
	s := &Store{rdb: rdb, hot: rdb, prefix: prefix}
	s.versions = &versionReads{read: s.readVersion}
	if c, ok := rdb.(interface {
		AutoPipeline() (*redis.AutoPipeliner, error)
	}); ok {
		// Shared per client and closed with it.
		if ap, err := c.AutoPipeline(); err == nil {
			s.hot = ap
		}
	}
	return s
}

// ackKey is one key per build; the hash tag puts nothing else in its slot on a cluster,
// which is fine because no command here touches two ack keys at once.
func (s *Store) ackKey(id int64) string {
	return s.prefix + "ack:{" + strconv.FormatInt(id, 10) + "}"
}

func (s *Store) versionKey() string { return s.prefix + "queue:version" }

// versionTTL bounds how long a lost bump (Redis paused or failing over while a stage was
// released, a replica dying between its commit and its bump) can keep idle runners from
// seeing pending builds: the version expires, a new one is made, every runner looks in
// Postgres once. GitLab expires its runner queue keys too.
const versionTTL = time.Minute

func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout)
}

// hotCall runs one command through the autopipeliner (s.hot) but answers its caller by
// ctx's deadline. go-redis's AutoFuture.Wait ignores the context: with Redis slow, a caller
// waited for its whole batch, the client's retries included, whatever its deadline (under
// jobapi-bench overload, a claim that took a build held its request ten seconds in the ack
// key's SET NX). The command goes on in the background and its answer is dropped.
func hotCall[T any](ctx context.Context, call func() (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := call()
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Grant sets the ack key of a fresh assignment with SET NX. go-redis retries a SET whose
// answer was lost, and the retry then finds the key: comparing the value tells our own
// earlier attempt from a real conflict.
func (s *Store) Grant(ctx context.Context, buildID int64, holder string, ttl time.Duration) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	ok, err := hotCall(ctx, func() (bool, error) { return s.hot.SetNX(ctx, s.ackKey(buildID), holder, ttl).Result() })
	if err != nil {
		return fmt.Errorf("set ack key: %w", unavailable(err))
	}
	if ok {
		return nil
	}
	cur, err := s.rdb.Get(ctx, s.ackKey(buildID)).Result()
	if err != nil {
		return fmt.Errorf("read ack key after SET NX: %w", unavailable(err))
	}
	if cur != holder {
		return fmt.Errorf("ack key of build %d held by %q, not %q", buildID, cur, holder)
	}
	return nil
}

// Refresh extends the ack key (keep-alive). Postgres already said the build waits for this
// holder, so a vanished key is recreated rather than refused.
func (s *Store) Refresh(ctx context.Context, buildID int64, holder string, ttl time.Duration) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(s.rdb.Set(ctx, s.ackKey(buildID), holder, ttl).Err())
}

// Release deletes the ack key.
func (s *Store) Release(ctx context.Context, buildID int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := hotCall(ctx, func() (int64, error) { return s.hot.Del(ctx, s.ackKey(buildID)).Result() })
	return unavailable(err)
}

// TTLs returns the time left on each live ack key, in one pipelined round trip. Each ack key
// has a slot of its own; the cluster client splits the pipeline per node and sends the
// parts concurrently, and any failed part fails the whole call, so a missing answer is
// never read as an expired key.
func (s *Store) TTLs(ctx context.Context, buildIDs []int64) (map[int64]time.Duration, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	cmds := make([]*redis.DurationCmd, len(buildIDs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range buildIDs {
			cmds[i] = p.PTTL(ctx, s.ackKey(id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read ack TTLs: %w", unavailable(err))
	}
	out := make(map[int64]time.Duration, len(buildIDs))
	for i, c := range cmds {
		// PTTL: -2 no key, -1 no expiry (never set by us; treat as alive for a full TTL).
		d := c.Val()
		switch {
		case d > 0:
			out[buildIDs[i]] = d
		case d == -1:
			out[buildIDs[i]] = time.Minute
		}
	}
	return out, nil
}

// Version returns the queue version, creating one if it expired or Redis lost it. The
// version it creates is announced like a bump (createVersionScript): unannounced, every
// replica's long poll would take it for a bump it missed and wake every held request, the
// whole fleet once a minute while nothing changes (versionTTL). Concurrent callers share
// one read that starts after each of them came (versionReads).
func (s *Store) Version(ctx context.Context) (string, error) { return s.versions.get(ctx) }

func (s *Store) readVersion(ctx context.Context) (string, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	v, err := s.rdb.Get(ctx, s.versionKey()).Result()
	if errors.Is(err, redis.Nil) {
		v, err = createVersionScript.Run(ctx, s.rdb, []string{s.versionKey()}, newVersion(), versionTTL.Milliseconds(), s.queueChannel()).Text()
	}
	return v, unavailable(err)
}

// createVersionScript sets a version if there is none and announces it (only the caller
// that set it), then returns the version in force.
var createVersionScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('PUBLISH', ARGV[3], ARGV[1])
end
return redis.call('GET', KEYS[1])`)

// Bump sets a new, never-seen version. Random values rather than INCR: after Redis loses
// the key a counter would restart and could equal a version a runner still echoes.
// Every bump is announced (queuefeed.go), so that held long polls wake for it.
func (s *Store) Bump(ctx context.Context) error { return s.BumpAnnounced(ctx, 0) }

func newVersion() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b)
}

// Ping checks that Redis answers. On a cluster it asks every master whether the cluster
// serves all its slots: a keyless PING reaches one node only, and a master answers PING
// even while the cluster is down (CLUSTERDOWN for every key).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return unavailable(cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", c.Options().Addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: %w: cluster_state is not ok", c.Options().Addr, errClusterState)
			}
			return nil
		}))
	}
	return unavailable(s.rdb.Ping(ctx).Err())
}

// errClusterState is a master that reports the cluster down (it would answer CLUSTERDOWN).
var errClusterState = errors.New("CLUSTERDOWN")

// traceWatchTTL is how long one read of a log keeps its runner on the short interval.
const traceWatchTTL = 10 * time.Second

func (s *Store) watchKey(id int64) string {
	return s.prefix + "trace:watch:{" + strconv.FormatInt(id, 10) + "}"
}

// Watch marks a build's log as being read.
func (s *Store) Watch(ctx context.Context, buildID int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(s.rdb.Set(ctx, s.watchKey(buildID), "1", traceWatchTTL).Err())
}

// Watched reports whether someone read the log in the last few seconds.
func (s *Store) Watched(ctx context.Context, buildID int64) (bool, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	n, err := hotCall(ctx, func() (int64, error) { return s.hot.Exists(ctx, s.watchKey(buildID)).Result() })
	return n > 0, unavailable(err)
}

func (s *Store) eventsChannel() string { return s.prefix + "pipeline-events" }

// Publish announces that a build of the pipeline changed.
func (s *Store) Publish(ctx context.Context, pipelineID int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := hotCall(ctx, func() (int64, error) {
		return s.hot.Publish(ctx, s.eventsChannel(), strconv.FormatInt(pipelineID, 10)).Result()
	})
	return unavailable(err)
}

// eventsPing is how long a silent subscription waits before checking its connection.
const eventsPing = 5 * time.Second

// Subscribe delivers pipeline events until ctx ends or the connection fails. It does not
// hide a broken connection behind go-redis's silent reconnects: the caller must know, so
// that waiters switch to polling while events may be missed.
func (s *Store) Subscribe(ctx context.Context, ready func(), fn func(pipelineID int64)) error {
	return s.receive(ctx, "pipeline events", []string{s.eventsChannel()}, ready, func(m *redis.Message) {
		if id, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
			fn(id)
		}
	})
}

// receive subscribes to channels and hands each message to fn until ctx ends (nil) or the
// connection fails (an error naming what): a silent subscription pings after eventsPing
// instead of trusting go-redis's reconnects. ready runs once every channel is subscribed.
func (s *Store) receive(ctx context.Context, what string, channels []string, ready func(), fn func(*redis.Message)) error {
	ps := s.rdb.Subscribe(ctx, channels...)
	defer ps.Close()
	subscribed := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, eventsPing)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var netErr interface{ Timeout() bool }
			if errors.As(err, &netErr) && netErr.Timeout() {
				pctx, cancel := callCtx(ctx)
				err = ps.Ping(pctx)
				cancel()
				if err == nil {
					continue
				}
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if subscribed++; subscribed == len(channels) {
				ready()
			}
		case *redis.Message:
			fn(m)
		}
	}
}
