package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds"
)

var _ builds.ChangeFeed = (*Store)(nil)

func (s *Store) changesChannel() string { return s.prefix + "build-changes" }

// PublishChanges sends a batch of change hints as one message: "pipeline:build:log" words
// separated by spaces (log is 1 when the build's log grew).
func (s *Store) PublishChanges(ctx context.Context, changes []builds.Change) error {
	if len(changes) == 0 {
		return nil
	}
	var b strings.Builder
	for i, c := range changes {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(c.PipelineID, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(c.BuildID, 10))
		if c.Log {
			b.WriteString(":1")
		} else {
			b.WriteString(":0")
		}
	}
	ctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := hotCall(ctx, func() (int64, error) { return s.hot.Publish(ctx, s.changesChannel(), b.String()).Result() })
	return unavailable(err)
}

// parseChanges reads a PublishChanges message; malformed words are skipped (a newer
// replica's format must not break an older one).
func parseChanges(msg string, fn func(builds.Change)) {
	for _, word := range strings.Fields(msg) {
		parts := strings.Split(word, ":")
		if len(parts) != 3 {
			continue
		}
		p, err1 := strconv.ParseInt(parts[0], 10, 64)
		b, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		fn(builds.Change{PipelineID: p, BuildID: b, Log: parts[2] == "1"})
	}
}

// SubscribeChanges delivers change hints and pipeline events until ctx ends or the
// connection fails; like Subscribe it reports a broken connection instead of hiding it, so
// that live views poll while hints may be missed.
func (s *Store) SubscribeChanges(ctx context.Context, ready func(), fn func(builds.Change)) error {
	events := s.eventsChannel()
	return s.receive(ctx, "change hints", []string{s.changesChannel(), events}, ready, func(m *redis.Message) {
		if m.Channel != events {
			parseChanges(m.Payload, fn)
		} else if id, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
			fn(builds.Change{PipelineID: id})
		}
	})
}

func (s *Store) revokedKey(id string) string { return s.prefix + "web:revoked:" + id }

// RevokeSession remembers a signed-out web session until it would have expired.
func (s *Store) RevokeSession(ctx context.Context, id string, until time.Time) error {
	ttl := time.Until(until)
	if ttl <= 0 {
		return nil
	}
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(s.rdb.Set(ctx, s.revokedKey(id), "1", ttl).Err())
}

// SessionRevoked reports whether a web session was signed out.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	n, err := hotCall(ctx, func() (int64, error) { return s.hot.Exists(ctx, s.revokedKey(id)).Result() })
	return n > 0, unavailable(err)
}
