// Package pipelinetest_test checks pipelines end to end (SPEC §5 reapers, §6 stages, waiter,
// stuck stages; the pipelines API, pipelines from a .gitlab-ci.yml and CI lint, auto-cancel)
// against real replicas, Postgres and Redis, over HTTP. Time-driven behaviour
// runs on an injected clock: the tests move it and call the workers' Once methods.
package pipelinetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the Redis fault tests make thousands on purpose.
	redis.SetLogger(quietRedis{})
	testenv.Main(m)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// --- server log --------------------------------------------------------------------------

// logBuffer collects a replica's JSON log.
type logBuffer struct{ testenv.Buffer }

// records parses every log line.
func (l *logBuffer) records(t testing.TB) []map[string]any {
	t.Helper()
	raw := l.String()
	var out []map[string]any
	for _, line := range strings.Split(raw, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// --- runners -----------------------------------------------------------------------------

// wantAborted requires the runner's next PUT and PATCH for the job to be the 403 that
// makes gitlab-runner abort, with Job-Status status.
func wantAborted(t testing.TB, c *jobapitest.Runner, j *runnerclient.Job, status string) {
	t.Helper()
	u, err := c.UpdateJob(context.Background(), j, runnerclient.StateRunning, runnerclient.UpdateOptions{})
	if err != nil || u.Code != http.StatusForbidden || u.JobStatus != status || u.State != runnerclient.UpdateAbort {
		t.Errorf("job %s: PUT running answered %d Job-Status %q (%s), err %v; want 403 Job-Status %s",
			j.JobInfo.Name, u.Code, u.JobStatus, u.State, err, status)
	}
	p, err := c.PatchTrace(context.Background(), j, 0, []byte("late log line\n"))
	if err != nil || p.Code != http.StatusForbidden || p.JobStatus != status || p.State != runnerclient.PatchAbort {
		t.Errorf("job %s: PATCH trace answered %d Job-Status %q (%s), err %v; want 403 Job-Status %s",
			j.JobInfo.Name, p.Code, p.JobStatus, p.State, err, status)
	}
}

// --- operator side -----------------------------------------------------------------------

type job = jobapitest.Job

// createPipeline posts a pipeline with a timeout strategy ("" for the default).
func createPipeline(t testing.TB, inst *jobapitest.Instance, projectID int64, strategy string, stages []string, jobs ...job) api.Pipeline {
	t.Helper()
	body := map[string]any{"stages": stages, "jobs": jobs}
	if strategy != "" {
		body["timeout_strategy"] = strategy
	}
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", projectID), body, &p)
	return p
}

var pipelineStatuses = []string{"created", "pending", "running", "manual", "scheduled", "success", "failed", "canceled"}

func terminal(status string) bool {
	return status == "success" || status == "failed" || status == "canceled"
}

// expect fetches the pipeline and checks its status and the status of the latest attempt
// of each named job; it returns the pipeline.
func expect(t testing.TB, inst *jobapitest.Instance, p api.Pipeline, status string, jobs map[string]string) api.Pipeline {
	t.Helper()
	got := inst.Pipeline(t, p)
	if !slices.Contains(pipelineStatuses, got.Status) {
		t.Errorf("pipeline %d status %q is not a pipeline status", got.ID, got.Status)
	}
	lat := jobapitest.Latest(got)
	summary := make([]string, 0, len(lat))
	for _, j := range got.Jobs {
		summary = append(summary, fmt.Sprintf("%s#%d:%s", j.Name, j.Attempt, j.Status))
	}
	for name, want := range jobs {
		if lat[name].Status != want {
			t.Errorf("pipeline %d: job %s is %q, want %q (jobs %v)", got.ID, name, lat[name].Status, want, summary)
		}
	}
	if got.Status != status {
		t.Errorf("pipeline %d is %q, want %q (jobs %v)", got.ID, got.Status, status, summary)
	}
	if terminal(got.Status) != (got.FinishedAt != nil) {
		t.Errorf("pipeline %d is %q with finished_at %v", got.ID, got.Status, got.FinishedAt)
	}
	return got
}

// eventsOf returns the events of one type of a job.
func eventsOf(t testing.TB, inst *jobapitest.Instance, projectID, id int64, typ string) []api.Event {
	t.Helper()
	return jobapitest.EventsOf(inst.Events(t, projectID, id), typ)
}

// --- waiting -----------------------------------------------------------------------------

// waitCall is one GET .../wait with its answer and duration.
type waitCall struct {
	res  api.PipelineWait
	code int
	took time.Duration
	at   time.Time // when the answer arrived
	err  error
}

func callWait(base string, projectID, id int64, timeoutSeconds int) waitCall {
	start := time.Now()
	req, err := http.NewRequest("GET", fmt.Sprintf("%s%s/wait?timeout=%d", base, jobapitest.PipelinePath(projectID, id), timeoutSeconds), nil)
	if err != nil {
		return waitCall{err: err}
	}
	req.Header.Set("PRIVATE-TOKEN", jobapitest.AdminToken)
	resp, err := jobapitest.HTTPClient.Do(req)
	if err != nil {
		return waitCall{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	wc := waitCall{code: resp.StatusCode, took: time.Since(start), at: time.Now(), err: err}
	if err == nil && resp.StatusCode == http.StatusOK {
		wc.err = json.Unmarshal(body, &wc.res)
	} else if err == nil {
		wc.err = fmt.Errorf("wait answered %d: %s", resp.StatusCode, body)
	}
	return wc
}

// finishedInDB lists the finished builds of a pipeline (every attempt), by id: what the
// waiter must report.
func finishedInDB(t testing.TB, inst *jobapitest.Instance, pipelineID int64) []int64 {
	t.Helper()
	rows, err := inst.Pool.Query(context.Background(), `SELECT id FROM builds WHERE pipeline_id = $1
        AND status IN ('success', 'failed', 'canceled', 'skipped') ORDER BY id`, pipelineID)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkWaitAnswer checks a wait answer against Postgres: the finished ids are exactly the
// finished builds, and jobs_remaining counts the unfinished latest attempts but optional
// manual jobs (the pipeline can end without them).
func checkWaitAnswer(t testing.TB, inst *jobapitest.Instance, pipelineID int64, w api.PipelineWait) {
	t.Helper()
	got := slices.Clone(w.Finished)
	slices.Sort(got)
	if want := finishedInDB(t, inst, pipelineID); !slices.Equal(got, want) {
		t.Errorf("wait finished %v, Postgres has %v", got, want)
	}
	var remaining int
	if err := inst.Pool.QueryRow(context.Background(), `SELECT count(*) FROM builds WHERE pipeline_id = $1
        AND retried_by IS NULL AND status NOT IN ('success', 'failed', 'canceled', 'skipped')
        AND NOT (status = 'manual' AND allow_failure)`, pipelineID).Scan(&remaining); err != nil {
		t.Fatal(err)
	}
	if w.JobsRemaining != remaining {
		t.Errorf("wait jobs_remaining %d, Postgres has %d unfinished", w.JobsRemaining, remaining)
	}
}

// eventsSubscribed waits until the replica's pipeline-events subscription is live, so
// that a latency measurement tests the events and not the poll.
func eventsSubscribed(t testing.TB, inst *jobapitest.Instance, want int64) {
	t.Helper()
	opt, err := redis.ParseURL(inst.Config.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	channel := inst.Config.RedisKeyPrefix + "pipeline-events"
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.PubSubNumSub(context.Background(), channel).Result()
		if err == nil && n[channel] >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber on %s after 10s (got %v, err %v)", channel, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
