package faulttest_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/localserver"
	"github.com/jobapi/jobapi/migrations"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// Postgres restarts (fast shutdown: sessions ended, open transactions rolled back) while
// runners poll, ack and finish. pgxpool reconnects by itself; what could not be answered is
// a 503 with Retry-After; no transaction is half applied; the invariants hold and every
// job still ends.
func TestPostgresRestartUnderLoad(t *testing.T) {
	t.Parallel()
	const jobs = 300
	// A server of this test's own: the shared one must not restart under other tests. Its
	// directory is ours (not t.TempDir: the postgres user must reach it), so Restart and
	// Stop keep the data.
	dir, err := os.MkdirTemp("", "faulttest-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	log := &testenv.Buffer{}
	pg, err := localserver.StartPostgres(context.Background(), dir, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
		if t.Failed() {
			t.Logf("postgres log:\n%s", log)
		}
	})
	if err := migrations.Up(pg.URL); err != nil {
		t.Fatal(err)
	}
	a := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) {
		c.DatabaseURL = pg.URL
		c.AckTTL = 10 * time.Second
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := underLoad(ctx, t, a, jobs, 0.3)

	closeWindow := f.openWindow()
	restartStart := time.Now()
	probe := probeReadiness(a.URL, restartStart)
	// Postgres stays down until readiness said so: the check does not depend on how quickly
	// it starts again.
	if err := pg.RestartAfter(context.Background(), func() { probe.sawDown(t, "Postgres is down") }); err != nil {
		t.Fatal(err)
	}
	pgBack := time.Since(restartStart)
	notReady, readyAgain := probe.wait(pgBack)
	firstJob := waitAnswer(t, f, restartStart, http.StatusCreated, 30*time.Second)
	during := closeWindow()
	waitFinished(t, a, 60*time.Second)
	cancel()
	f.wait()

	f.codes.noServerErrors(t)
	if notReady == 0 || readyAgain == 0 {
		t.Errorf("readiness: 503 from %v to %v after the restart began; want 503 while Postgres is down, then 200", notReady, readyAgain)
	}
	f.checkNoDoubleAssignment(t)
	checkRefusedAcks(t, a, f)
	byStatus := invariants{RetryMax: 2, Done: true}.check(t, a.Pool)
	if byStatus["success"] != jobs {
		t.Errorf("builds: %s; want all %d jobs successful", statusLine(byStatus), jobs)
	}
	t.Logf("Postgres accepted connections again %v after the restart began; readiness was 503 from %v to %v; first job handed out %v after the restart began",
		pgBack.Round(time.Millisecond), notReady.Round(time.Millisecond), readyAgain.Round(time.Millisecond), firstJob.Round(time.Millisecond))
	t.Logf("answers while Postgres was down or recovering: %s", during)
	t.Logf("all answers: %s", &f.codes)
}

// waitAnswer waits until the fleet's open window counted an answer with code to /jobs/request,
// and returns the time since start.
func waitAnswer(t *testing.T, f *fleet, start time.Time, code int, timeout time.Duration) time.Duration {
	t.Helper()
	w := f.window.Load()
	for w.get(epRequest, code) == 0 {
		if time.Since(start) > timeout {
			t.Fatalf("no %d to a job request within %v of the fault", code, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}
