// Package twophase_test checks jobapi's two-phase job commit end to end: real replicas
// (jobapitest) on a real Postgres and Redis, driven over HTTP by runnerclient, the way
// gitlab-runner drives GitLab. SPEC §3, §4 (the PUT table), §5 and the §11 invariants.
package twophase_test

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
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

// newRunner plays gitlab-runner 19.4 (shell); twoPhase sets info.features.two_phase_job_commit.
func newRunner(t testing.TB, baseURL, token, systemID string, twoPhase bool) *jobapitest.Runner {
	r := jobapitest.NewRunner(t, baseURL, token, systemID)
	r.Info.Features.TwoPhaseJobCommit = twoPhase
	return r
}

// taggedRunner registers a runner for tag and returns it as manager "s_<tag>".
func taggedRunner(t testing.TB, inst *jobapitest.Instance, tag string, twoPhase bool) *jobapitest.Runner {
	t.Helper()
	_, token := inst.CreateRunner(t, tag)
	return newRunner(t, inst.URL, token, "s_"+tag, twoPhase)
}

// take is Runner.Take plus the check made of every assignment here: a deadline above 0 s.
func take(t testing.TB, r *jobapitest.Runner) *runnerclient.Job {
	t.Helper()
	job := r.Take(t)
	if job.RunnerInfo.Timeout <= 0 {
		t.Errorf("job %d: runner_info.timeout = %d, want > 0 (a 0 s deadline was GitLab's bug)", job.ID, job.RunnerInfo.Timeout)
	}
	return job
}

// rawPut sends a hand-written PUT /jobs/:id body, for what runnerclient never sends.
func rawPut(t testing.TB, baseURL string, id int64, jobToken, body string) (int, http.Header, []byte) {
	t.Helper()
	var hdr []string
	if jobToken != "" {
		hdr = []string{"JOB-TOKEN", jobToken}
	}
	resp, b := jobapitest.Send(t, baseURL, http.MethodPut, fmt.Sprintf("/api/v4/jobs/%d", id), body, hdr...)
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

// oneEvent returns the only event of typ, failing otherwise.
func oneEvent(t testing.TB, ev []api.Event, typ string) api.Event {
	t.Helper()
	got := jobapitest.EventsOf(ev, typ)
	if len(got) != 1 {
		t.Fatalf("want exactly one %q event, got %d in %s", typ, len(got), jobapitest.EventTypes(ev))
	}
	return got[0]
}

// wantJob checks a job's status and failure reason ("" for none).
func wantJob(t testing.TB, j api.JobDetail, status, reason string) {
	t.Helper()
	got := jobapitest.Reason(j)
	if j.Status != status || got != reason {
		t.Fatalf("job %d: status %s reason %q, want %s reason %q", j.ID, j.Status, got, status, reason)
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
