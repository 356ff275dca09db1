package pgflags_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testDB is a fresh migrated database for one test, dropped at cleanup. Tests open their own
// pools on it: a second pool is a second replica, a pool through the proxy a cut-off one.
func testDB(t *testing.T) string {
	t.Helper()
	return testenv.DatabaseURL(t)
}

// testPool opens a pool on databaseURL, closed at cleanup.
func testPool(t *testing.T, databaseURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
