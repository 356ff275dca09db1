package localserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestPostgresStartStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg, err := StartPostgres(ctx, "", t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })

	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	var fsync, encoding string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('server_encoding')").Scan(&fsync, &encoding); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if fsync != "off" || encoding != "UTF8" {
		t.Errorf("fsync=%s server_encoding=%s, want off and UTF8", fsync, encoding)
	}

	if err := pg.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if PostgresReachable(ctx, pg.URL) {
		t.Error("server still reachable after Stop")
	}
	if _, err := os.Stat(pg.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s behind (stat: %v)", pg.Dir, err)
	}
}

// A directory the caller gives is kept, and a cluster already in it is reused: what
// `jobapi dev` needs to keep its data between runs.
func TestPostgresReusesGivenDir(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir, err := os.MkdirTemp("", "localserver-test-") // not t.TempDir: 0700 parents stop the postgres user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	exec := func(sql string) error {
		pg, err := StartPostgres(ctx, dir, t.Output())
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				t.Error(err)
			}
		}()
		conn, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE kept (id int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("given dir removed or empty after Stop: %v", err)
	}
	if err := exec("SELECT * FROM kept"); err != nil {
		t.Fatalf("second start did not reuse the cluster: %v", err)
	}
}

func TestRedisRestartLosesKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r, err := StartRedis(ctx, "", t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	client := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer client.Close()

	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := r.Addr
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Addr != addr {
		t.Errorf("Restart moved the server from %s to %s", addr, r.Addr)
	}
	if err := client.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after Restart: %v, want redis.Nil", err)
	}

	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if RedisReachable(ctx, r.URL) {
		t.Error("server still reachable after Stop")
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s behind (stat: %v)", r.Dir, err)
	}
}

// RestartLoading holds the server LOADING, however long the test takes, until release;
// then the dataset is all there. Stop ends a hold at once.
func TestRedisRestartLoadingIsHeldUntilReleased(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r, err := StartRedis(ctx, "", t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	if err := r.FillForLoading(ctx, 1000, 100); err == nil {
		t.Error("FillForLoading took values under a KiB, which a hold cannot answer between")
	}
	const keys = 2000 // at most 20 s held
	if err := r.FillForLoading(ctx, keys, 1100); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer client.Close()

	release, err := r.RestartLoading(ctx)
	if err != nil {
		t.Fatal(err)
	}
	heldSince := time.Now()
	for time.Since(heldSince) < time.Second {
		if err := client.Get(ctx, "fill:1").Err(); !redis.IsLoadingError(err) {
			t.Fatalf("GET %v after RestartLoading: %v, want LOADING", time.Since(heldSince), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := client.DBSize(ctx).Result(); err != nil || n != keys {
		t.Errorf("after release: %d keys (%v), want %d", n, err, keys)
	}
	if err := release(ctx); err != nil {
		t.Errorf("a second release: %v", err)
	}

	if _, err := r.RestartLoading(ctx); err != nil {
		t.Fatal(err)
	}
	stopStart := time.Now()
	if err := r.Stop(); err != nil {
		t.Fatalf("Stop while held: %v", err)
	}
	if took := time.Since(stopStart); took > 5*time.Second {
		t.Errorf("Stop while held LOADING took %v", took)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, err := StartRedisCluster(ctx, "", t.Output(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer client.Close()

	// Enough keys to land on every master.
	for i := range 100 {
		if err := client.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	perNode := map[string]int64{}
	for _, addr := range c.Addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		n, err := node.DBSize(ctx).Result()
		node.Close()
		if err != nil {
			t.Fatal(err)
		}
		perNode[addr] = n
	}
	for addr, n := range perNode {
		if n == 0 {
			t.Errorf("master %s holds no keys: %v", addr, perNode)
		}
	}
}

func TestMissingBinaryIsNamed(t *testing.T) {
	_, err := findBinary("no-such-server", "/nonexistent/*/bin")
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "no-such-server") {
		t.Errorf("findBinary error = %v, want ErrNotInstalled naming the binary", err)
	}

	t.Setenv("PATH", t.TempDir())
	_, err = StartRedis(t.Context(), "", nil)
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "redis-server") {
		t.Errorf("StartRedis error = %v, want ErrNotInstalled naming redis-server", err)
	}
}

func TestReachableFalseWhenNothingListens(t *testing.T) {
	t.Parallel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if PostgresReachable(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)) {
		t.Error("PostgresReachable true on a closed port")
	}
	if RedisReachable(ctx, fmt.Sprintf("redis://127.0.0.1:%d/0", port)) {
		t.Error("RedisReachable true on a closed port")
	}
}
