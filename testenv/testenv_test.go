package testenv

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

// checkDatabase asserts url is a migrated database and returns its name.
func checkDatabase(t *testing.T, url string) string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var name string
	var migrated bool
	if err := conn.QueryRow(ctx, "SELECT current_database(), to_regclass('builds') IS NOT NULL").Scan(&name, &migrated); err != nil {
		t.Fatal(err)
	}
	if !migrated {
		t.Errorf("database %s has no builds table", name)
	}
	return name
}

func databaseExists(t *testing.T, s *servers, name string) bool {
	t.Helper()
	var exists bool
	err := s.admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestParallelTestsGetTheirOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var names []string
	t.Run("group", func(t *testing.T) {
		for _, sub := range []string{"a", "b", "c"} {
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				name := checkDatabase(t, DatabaseURL(t))
				// The pool reaches the same kind of database, and writes stay in it.
				pool := Pool(t)
				if _, err := pool.Exec(t.Context(), "CREATE TABLE only_here (id int)"); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			})
		}
	})
	if len(names) != 3 || names[0] == names[1] || names[1] == names[2] || names[0] == names[2] {
		t.Fatalf("databases %v, want three distinct ones", names)
	}
	for _, name := range names {
		if databaseExists(t, shared, name) {
			t.Errorf("database %s still exists after its test ended", name)
		}
	}
}

func TestRedisPrefixIsolation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var mu sync.Mutex
	var prefixes []string
	t.Run("group", func(t *testing.T) {
		for _, sub := range []string{"a", "b"} {
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				client, prefix := Redis(t)
				for _, k := range []string{"x", "y"} {
					if err := client.Set(t.Context(), prefix+k, sub, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if got := client.Get(t.Context(), prefix+"x").Val(); got != sub {
					t.Errorf("GET %sx = %q, want %q", prefix, got, sub)
				}
				mu.Lock()
				prefixes = append(prefixes, prefix)
				mu.Unlock()
			})
		}
	})
	if len(prefixes) != 2 || prefixes[0] == prefixes[1] {
		t.Fatalf("prefixes %v, want two distinct ones", prefixes)
	}
	client, _ := Redis(t)
	for _, p := range prefixes {
		if keys := client.Keys(ctx, p+"*").Val(); len(keys) != 0 {
			t.Errorf("keys %v left after their test ended", keys)
		}
	}
}

func TestOwnRedisIsSeparate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	shared, prefix := Redis(t)
	if err := shared.Set(ctx, prefix+"k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	own := OwnRedis(t)
	client := redis.NewClient(&redis.Options{Addr: own.Addr})
	defer client.Close()
	if err := client.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("own Redis after Restart: %v", err)
	}
	if got := shared.Get(ctx, prefix+"k").Val(); got != "v" {
		t.Errorf("shared Redis lost %sk: got %q", prefix, got)
	}
}

// The path CI takes on a fresh machine: nothing running, servers started from the binaries.
func TestThrowawayServers(t *testing.T) {
	t.Parallel()
	s := &servers{getenv: func(k string) string {
		if k == envForceThrowaway {
			return "1"
		}
		return os.Getenv(k)
	}}
	t.Cleanup(func() { s.stop() }) // in case a check below fails first

	t.Run("use", func(t *testing.T) {
		name := checkDatabase(t, s.databaseURL(t))
		if s.pg == nil {
			t.Fatal("Postgres was not a throwaway server")
		}
		if !strings.HasPrefix(name, "jobapi_test_") {
			t.Errorf("database %q", name)
		}
		client, prefix := s.redisClient(t)
		if s.redis == nil || client.Options().Addr != s.redis.Addr {
			t.Fatalf("Redis was not the throwaway server")
		}
		if err := client.Set(t.Context(), prefix+"k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})

	pg, r := s.pg, s.redis
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{pg.Dir, r.Dir} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (stat: %v)", dir, err)
		}
	}
}

func TestUnreachableEnvURLFailsClearly(t *testing.T) {
	t.Parallel()
	s := &servers{getenv: func(k string) string {
		if k == envDatabaseURL {
			return "postgres://u:secret@127.0.0.1:1/x"
		}
		return ""
	}}
	err := s.postgres()
	if err == nil || !strings.Contains(err.Error(), envDatabaseURL) || strings.Contains(err.Error(), "secret") {
		t.Errorf("error = %v, want one naming %s without the password", err, envDatabaseURL)
	}
}
