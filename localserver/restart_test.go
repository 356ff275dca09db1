package localserver

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Restart brings the same data back on the same port, so that a client's connection
// string keeps working across the fault: what a pool must reconnect to.
func TestPostgresRestartKeepsPortAndData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir, err := os.MkdirTemp("", "localserver-test-") // not t.TempDir: 0700 parents stop the postgres user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pg, err := StartPostgres(ctx, dir, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	url := pg.URL
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if pg.URL != url {
		t.Errorf("Restart moved the server from %s to %s", url, pg.URL)
	}
	// The old session was ended by the shutdown.
	if err := conn.Ping(ctx); err == nil {
		t.Error("a session from before the restart still answers")
	}
	conn.Close(ctx)
	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect after Restart: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 1 {
		t.Fatalf("data after Restart: %d rows, %v; want the row written before", n, err)
	}
}
