package testenv

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/localserver"
)

// Redis returns a client on the shared Redis and a key prefix of this test's own. The test
// must put every key under prefix; they are deleted, and the client closed, when it ends.
func Redis(t testing.TB) (client *redis.Client, prefix string) {
	t.Helper()
	return shared.redisClient(t)
}

// OwnRedis starts a redis-server for this test alone, stopped when the test ends: for tests
// that FLUSHDB, Restart or otherwise break the server.
func OwnRedis(t testing.TB) *localserver.Redis {
	t.Helper()
	log := &Buffer{}
	r, err := localserver.StartRedis(context.Background(), t.TempDir(), log)
	if err != nil {
		t.Fatalf("testenv: own Redis for this test: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("testenv: %v", err)
		}
		// The server's log explains a fault test's failure; otherwise it is noise.
		if t.Failed() {
			t.Logf("testenv: log of the test's own redis-server:\n%s", log)
		}
	})
	return r
}

// Buffer is a bytes.Buffer that a server's output copier and a test can share: tests use it
// to collect logs of servers they start.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (s *servers) redisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	s.redisOnce.Do(func() {
		s.redisURL, s.redisErr = s.resolve("Redis", envRedisURL, defaultRedisURLs, localserver.RedisReachable,
			func(ctx context.Context) (string, error) {
				r, err := localserver.StartRedis(ctx, "", nil)
				if err != nil {
					return "", err
				}
				s.redis = r
				return r.URL, nil
			})
	})
	if s.redisErr != nil {
		t.Fatalf("testenv: %v", s.redisErr)
	}
	opt, err := redis.ParseURL(s.redisURL)
	if err != nil {
		t.Fatalf("testenv: %s: %v", envRedisURL, err)
	}
	client := redis.NewClient(opt)
	prefix := randomName("t")[:13] + ":" // short: it is in every key the test writes
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteKeys(ctx, client, prefix); err != nil {
			t.Errorf("testenv: delete this test's Redis keys: %v", err)
		}
	})
	return client, prefix
}

// deleteKeys removes every key under prefix, in batches so a big test does not block Redis.
func deleteKeys(ctx context.Context, client *redis.Client, prefix string) error {
	iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := client.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan %s*: %w", prefix, err)
	}
	return flush()
}
