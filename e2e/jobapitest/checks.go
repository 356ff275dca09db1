package jobapitest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/redisstore"
)

// PipelinePath is the operator API path of a pipeline.
func PipelinePath(projectID, id int64) string {
	return fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", projectID, id)
}

// Pipeline returns the operator view of a pipeline as it is now.
func (i *Instance) Pipeline(t testing.TB, p api.Pipeline) api.Pipeline {
	t.Helper()
	var out api.Pipeline
	i.MustDo(t, http.StatusOK, "GET", PipelinePath(p.ProjectID, p.ID), nil, &out)
	return out
}

// Latest maps each job name of a pipeline to its latest attempt.
func Latest(p api.Pipeline) map[string]api.PipelineJob {
	out := map[string]api.PipelineJob{}
	for _, j := range p.Jobs {
		if j.RetriedBy == nil {
			out[j.Name] = j
		}
	}
	return out
}

// JobID returns the id of the latest attempt of a pipeline's named job, failing the test
// if it has none.
func JobID(t testing.TB, p api.Pipeline, name string) int64 {
	t.Helper()
	j, ok := Latest(p)[name]
	if !ok {
		t.Fatalf("pipeline %d has no job %q", p.ID, name)
	}
	return j.ID
}

// EventsOf returns the events of one type, oldest first.
func EventsOf(ev []api.Event, typ string) []api.Event {
	var out []api.Event
	for _, e := range ev {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// WantEvents fails the test unless the history's event types are want, oldest first.
func WantEvents(t testing.TB, ev []api.Event, want ...string) {
	t.Helper()
	if got := EventTypes(ev); got != strings.Join(want, ",") {
		t.Fatalf("events %s, want %s", got, strings.Join(want, ","))
	}
}

// WaitJobStatus polls the job's operator view until it has status, failing the test when
// timeout passes first; it returns the job as it then is.
func (i *Instance) WaitJobStatus(t testing.TB, projectID, id int64, status string, timeout time.Duration) api.JobDetail {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := i.Job(t, projectID, id)
		if j.Status == status {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s after %v, want %s", id, j.Status, timeout, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RedisErrorKinds is every jobapi_redis_errors_total sample of the replica ("none" if it
// counted none), for a fault test's log.
func (i *Instance) RedisErrorKinds(t testing.TB) string {
	t.Helper()
	var parts []string
	for _, k := range []string{redisstore.KindLoading, redisstore.KindClusterDown, redisstore.KindFailover,
		redisstore.KindRefused, redisstore.KindReset, redisstore.KindTimeout, redisstore.KindCanceled,
		redisstore.KindClosed, redisstore.KindOther} {
		if v := i.Metric(t, `jobapi_redis_errors_total{kind="`+k+`"}`); v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Metric reads one sample of the replica's /metrics, 0 when it is absent: the name with its
// labels exactly as exposed, e.g. `jobapi_redis_errors_total{kind="loading"}`.
func (i *Instance) Metric(t testing.TB, sample string) float64 {
	t.Helper()
	resp, body := Send(t, i.URL, "GET", "/metrics", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("/metrics %s: %v", sample, err)
			}
			total += f
		}
	}
	return total
}

// Querier is a pool, a connection or a transaction: what QueryInt reads through.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// QueryInt runs a query that returns one number (a count(*), mostly) and fails the test on
// an error.
func QueryInt(t testing.TB, db Querier, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Reason is a job's failure reason, "" when it has none.
func Reason(j api.JobDetail) string {
	if j.FailureReason == nil {
		return ""
	}
	return *j.FailureReason
}
