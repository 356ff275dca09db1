package polltest_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestIdlePollWithoutPostgres proves that an idle poll (last_update equal to the current
// queue version) is answered from Redis and memory alone. The method: after one poll has
// warmed the runner cache, the test database is closed to new connections and every
// existing connection to it (the replica's pool included) is terminated. Any query the
// replica tried would now fail. 50 idle polls must still answer 204 echoing the version;
// a control poll with a stale last_update, which must read Postgres, fails at the same
// moment, which shows that the setup really cut the replica off. This is deterministic,
// unlike counting transactions in pg_stat_database (flushed lazily, and the flag
// provider's refresh queries share the database), and pg_stat_statements is not loaded.
func TestIdlePollWithoutPostgres(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)

	resp, b := jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("first poll: %d %s, want 204", resp.StatusCode, b)
	}
	version := resp.Header.Get("X-GitLab-Last-Update")
	if version == "" {
		t.Fatal("204 without X-GitLab-Last-Update")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// ALTER DATABASE … ALLOW_CONNECTIONS cannot target the current database: work from the
	// server's maintenance database.
	u, err := url.Parse(inst.Config.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ident := pgx.Identifier{db}.Sanitize()
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if _, err := conn.Exec(context.Background(), "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS true"); err != nil {
			t.Errorf("re-allow connections: %v", err)
		}
	}
	defer restore()
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1`, db).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("the replica held no connection to terminate; the test would prove nothing")
	}

	for i := range 50 {
		resp, b := jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", version)
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-GitLab-Last-Update") != version {
			t.Fatalf("idle poll %d with Postgres unreachable: %d, X-GitLab-Last-Update %q (want 204, %q); body %s",
				i, resp.StatusCode, resp.Header.Get("X-GitLab-Last-Update"), version, b)
		}
	}
	// Control: a poll that needs Postgres fails now. A new version first: at the old one
	// this runner's profile is recorded as found empty, and a poll after a bump would be
	// answered from that record without Postgres.
	if err := inst.Redis.Set(ctx, inst.Config.RedisKeyPrefix+"queue:version", "control-version", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	resp, b = jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", "stale-version")
	if resp.StatusCode < 500 {
		t.Fatalf("control poll with a stale last_update: %d %s; want a 5xx while Postgres is cut off", resp.StatusCode, b)
	}
	restore()

	// Back to normal once the pool has replaced its dead connections: each request that
	// meets one is answered 503 (retry), never 500.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, b = inst.Do(t, "GET", "/api/v4/runners", nil)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("request on a terminated pool connection: %d %s, want 503 with Retry-After", resp.StatusCode, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not recover: %d %s", resp.StatusCode, b)
		}
	}
	// A new build bumps the version, and the same last_update now finds it.
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "j", "stage": "test", "script": "x"})
	resp, b = jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", version)
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
}

// TestIdlePollVersionLifecycle checks X-GitLab-Last-Update: a new build changes it, and a
// runner echoing an old version is sent to Postgres and finds the build.
func TestIdlePollVersionLifecycle(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	resp, _ := jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", "")
	v1 := resp.Header.Get("X-GitLab-Last-Update")
	resp, _ = jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", v1)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-GitLab-Last-Update") != v1 {
		t.Fatalf("idle poll: %d %q, want 204 %q", resp.StatusCode, resp.Header.Get("X-GitLab-Last-Update"), v1)
	}
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "j", "stage": "test", "script": "x"})
	resp, b := jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", v1)
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	resp, _ = jobapitest.RequestJob(t, inst.URL, token, "s_0123456789ab", v1)
	v2 := resp.Header.Get("X-GitLab-Last-Update")
	if resp.StatusCode != http.StatusNoContent || v2 == "" || v2 == v1 {
		t.Errorf("after a new build: %d, version %q (old %q); want 204 with a new version", resp.StatusCode, v2, v1)
	}
}
