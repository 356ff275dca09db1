package pipelinetest_test

import (
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// A runner that vanishes mid-job leaves it running without updates: the reaper fails it as
// no_updates_running, which `retry: when: stuck_or_timeout_failure` covers as GitLab's
// does (GitLab fails such a job as stuck_or_timeout_failure); a retry for other reasons
// only leaves it failed.
func TestVanishedRunnerRetriedAsStuckOrTimeout(t *testing.T) {
	t.Parallel()
	clock := jobapitest.NewClock(time.Time{})
	inst := jobapitest.Start(t, jobapitest.Options{Now: clock.Now, Configure: func(c *server.Config) {
		c.NoUpdatesTimeout = time.Hour
	}})
	t0 := clock.Now()
	p := inst.CreateYAML(t, 45, "", `
covered:
  script: make
  retry:
    max: 1
    when: stuck_or_timeout_failure
other:
  script: make
  retry:
    max: 1
    when: [script_failure, runner_system_failure]
`)
	vanished := inst.NewRunner(t)
	jobs := vanished.TakeAll(t, 2)
	// The runner's machine is gone: no update, no trace, no final update.
	clock.Set(t0.Add(time.Hour + time.Second))
	res, err := inst.Server.Reaper.ReapOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.NoUpdates != 2 || res.Retried != 1 {
		t.Fatalf("reap: %d failed without updates, %d retried; want 2, 1", res.NoUpdates, res.Retried)
	}
	covered := inst.Job(t, 45, jobs["covered"].ID)
	if jobapitest.Reason(covered) != builds.ReasonNoUpdatesRunning || covered.RetriedBy == nil {
		t.Fatalf("covered: %s/%q retried by %v; want failed/no_updates_running and a retry", covered.Status, jobapitest.Reason(covered), covered.RetriedBy)
	}
	other := inst.Job(t, 45, jobs["other"].ID)
	if jobapitest.Reason(other) != builds.ReasonNoUpdatesRunning || other.RetriedBy != nil {
		t.Errorf("other: %s/%q retried by %v; want failed/no_updates_running, not retried", other.Status, jobapitest.Reason(other), other.RetriedBy)
	}
	// The next runner takes the retry and finishes it.
	next := inst.NewRunner(t)
	retry := next.TakeNamed(t, "covered")
	if retry.ID != *covered.RetriedBy {
		t.Fatalf("took %d, want the retry %d", retry.ID, *covered.RetriedBy)
	}
	next.Finish(t, retry, "success", "")
	expect(t, inst, p, "failed", map[string]string{"covered": "success", "other": "failed"})
}
