// Package twophase_test checks jobapi's two-phase job commit end to end: real replicas
// (jobapitest) on a real Postgres and Redis, driven over HTTP by runnerclient, the way
// gitlab-runner drives GitLab. SPEC §3, §4 (the PUT table), §5 and the §11 invariants.
package twophase_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// flagName is the OpenFeature key of the two-phase flag (SPEC §4, §8).
const flagName = "allow_runner_job_acknowledgement"

// Build states and failure reasons as the API spells them.
const (
	stPending  = "pending"
	stWaiting  = "waiting_for_runner_ack"
	stRunning  = "running"
	stCanceled = "canceled"
	stFailed   = "failed"
	stSuccess  = "success"

	provisioningTimeout = "runner_provisioning_timeout"
)

// enableFlag turns the two-phase flag on for each project. Call inst.WaitFlags before
// relying on it (EnableTwoPhase waits once per project; this waits once for all).
func enableFlag(t testing.TB, inst *jobapitest.Instance, projects ...int64) {
	t.Helper()
	for _, p := range projects {
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/features/"+flagName,
			map[string]any{"value": true, "project": strconv.FormatInt(p, 10)}, nil)
	}
}

var seq atomic.Int64

// uniqueTag isolates a scenario inside a shared instance: its runner takes only jobs
// carrying the tag, and nobody else's runner does.
func uniqueTag() string { return fmt.Sprintf("tag%d", seq.Add(1)) }

// jobDef is a one-line job of stage "test".
func jobDef(name string, tags ...string) jobapitest.Job {
	if tags == nil {
		tags = []string{}
	}
	return jobapitest.Job{"name": name, "stage": "test", "script": []string{"echo " + name}, "tags": tags}
}

// runner is one runner manager (token + system_id) driving the runner API.
type runner struct {
	*runnerclient.Client
	t testing.TB
}

// newRunner plays gitlab-runner 19.4 (shell); twoPhase sets info.features.two_phase_job_commit.
func newRunner(t testing.TB, baseURL, token, systemID string, twoPhase bool) *runner {
	c := runnerclient.New(baseURL, token, systemID)
	c.Info.Features.TwoPhaseJobCommit = twoPhase
	c.MaxWait = 10 * time.Millisecond
	t.Cleanup(c.CloseIdleConnections)
	return &runner{Client: c, t: t}
}

// taggedRunner registers a runner for tag and returns it as manager "s_<tag>".
func taggedRunner(t testing.TB, inst *jobapitest.Instance, tag string, twoPhase bool) *runner {
	t.Helper()
	_, token := inst.CreateRunner(t, tag)
	return newRunner(t, inst.URL, token, "s_"+tag, twoPhase)
}

// take requests a job and fails the test unless one is assigned (201).
func (r *runner) take() *runnerclient.Job {
	r.t.Helper()
	job, res, err := r.RequestJob(context.Background())
	if err != nil {
		r.t.Fatalf("request job: %v (%d %s)", err, res.Code, res.Message)
	}
	if res.Code != http.StatusCreated || job == nil {
		r.t.Fatalf("request job: status %d (%s), want 201 with a job", res.Code, res.Message)
	}
	if job.RunnerInfo.Timeout <= 0 {
		r.t.Errorf("job %d: runner_info.timeout = %d, want > 0 (a 0 s deadline was GitLab's bug)", job.ID, job.RunnerInfo.Timeout)
	}
	return job
}

// none requests a job and fails the test unless the answer is 204.
func (r *runner) none() {
	r.t.Helper()
	job, res, err := r.RequestJob(context.Background())
	if err != nil || res.Code != http.StatusNoContent {
		id := int64(0)
		if job != nil {
			id = job.ID
		}
		r.t.Fatalf("request job: status %d, job %d, err %v; want 204", res.Code, id, err)
	}
}

// put sends PUT /jobs/:id; a transport error fails the test.
func (r *runner) put(job *runnerclient.Job, state string, opts runnerclient.UpdateOptions) runnerclient.UpdateResult {
	r.t.Helper()
	res, err := r.UpdateJob(context.Background(), job, state, opts)
	if err != nil {
		r.t.Fatalf("PUT job %d state=%s: %v", job.ID, state, err)
	}
	return res
}

// wantUpdate checks the status code and the Job-Status header of a PUT answer.
func wantUpdate(t testing.TB, what string, res runnerclient.UpdateResult, code int, jobStatus string) {
	t.Helper()
	if res.Code != code || res.JobStatus != jobStatus {
		t.Fatalf("%s: got %d Job-Status %q, want %d Job-Status %q", what, res.Code, res.JobStatus, code, jobStatus)
	}
	// gitlab-runner drops the job on these and only these (runner-wire-format §2.3).
	abort := code == http.StatusForbidden || code == http.StatusNotFound || jobStatus == stFailed || jobStatus == stCanceled
	if abort != (res.State == runnerclient.UpdateAbort) {
		t.Fatalf("%s: runner would read %v (abort=%v)", what, res.State, abort)
	}
}

// rawPut sends a hand-written PUT /jobs/:id body, for what runnerclient never sends.
func rawPut(t testing.TB, baseURL string, id int64, jobToken, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/api/v4/jobs/%d", baseURL, id), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if jobToken != "" {
		req.Header.Set("JOB-TOKEN", jobToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT job %d: %v", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// wantJSONMessage checks SPEC §4's error envelope: application/json, {"message": "..."}.
func wantJSONMessage(t testing.TB, what string, h http.Header, body []byte) string {
	t.Helper()
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || mt != "application/json" {
		t.Fatalf("%s: Content-Type %q, want application/json", what, h.Get("Content-Type"))
	}
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Message == "" {
		t.Fatalf("%s: body %s is not {\"message\": ...} (%v)", what, body, err)
	}
	return e.Message
}

// ackKeyTTL is the live ack key's PTTL: -2 when there is no key.
func ackKeyTTL(t testing.TB, inst *jobapitest.Instance, id int64) time.Duration {
	t.Helper()
	d, err := inst.Redis.PTTL(context.Background(), fmt.Sprintf("%sack:{%d}", inst.Config.RedisKeyPrefix, id)).Result()
	if err != nil {
		t.Fatalf("PTTL of the ack key of build %d: %v", id, err)
	}
	return d
}

// ackTTLSeconds reads ack.ttl_seconds from the job JSON (fails if the job does not wait).
func ackTTLSeconds(t testing.TB, j api.JobDetail) float64 {
	t.Helper()
	if j.Status != stWaiting || j.Ack == nil || j.Ack.TTLSeconds == nil {
		t.Fatalf("job %d: status %s ack %+v, want waiting with ack.ttl_seconds", j.ID, j.Status, j.Ack)
	}
	return *j.Ack.TTLSeconds
}

// eventsOf returns a job's events of one type.
func eventsOf(ev []api.Event, typ string) []api.Event {
	var out []api.Event
	for _, e := range ev {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// oneEvent returns the only event of typ, failing otherwise.
func oneEvent(t testing.TB, ev []api.Event, typ string) api.Event {
	t.Helper()
	got := eventsOf(ev, typ)
	if len(got) != 1 {
		t.Fatalf("want exactly one %q event, got %d in %s", typ, len(got), jobapitest.EventTypes(ev))
	}
	return got[0]
}

// wantEvents compares the whole event history by type.
func wantEvents(t testing.TB, ev []api.Event, want ...string) {
	t.Helper()
	if got := jobapitest.EventTypes(ev); got != strings.Join(want, ",") {
		t.Fatalf("events = %s, want %s", got, strings.Join(want, ","))
	}
}

// wantJob checks a job's status and failure reason ("" for none).
func wantJob(t testing.TB, j api.JobDetail, status, reason string) {
	t.Helper()
	got := ""
	if j.FailureReason != nil {
		got = *j.FailureReason
	}
	if j.Status != status || got != reason {
		t.Fatalf("job %d: status %s reason %q, want %s reason %q", j.ID, j.Status, got, status, reason)
	}
}

// waitStatus polls the job JSON until the job reaches status or timeout passes.
func waitStatus(t testing.TB, inst *jobapitest.Instance, project, id int64, status string, timeout time.Duration) api.JobDetail {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := inst.Job(t, project, id)
		if j.Status == status {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s after %v, want %s", id, j.Status, timeout, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func detailFloat(t testing.TB, e api.Event, key string) float64 {
	t.Helper()
	v, ok := e.Detail[key].(float64)
	if !ok {
		t.Fatalf("event %s: detail %v has no number %q", e.Type, e.Detail, key)
	}
	return v
}
