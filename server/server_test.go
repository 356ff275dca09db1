package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestLoadConfigDefaultsAndErrors(t *testing.T) {
	cfg, err := server.LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AckTTL != 120*time.Second || cfg.MaxProvisioningWait != time.Hour || cfg.SweepInterval != 5*time.Second ||
		cfg.AutoRetryMax != 2 || cfg.TraceLimit != 100_000_000 || cfg.StuckStageTimeout != 2*time.Hour || !cfg.AutoMigrate ||
		cfg.LongPoll != 0 || cfg.ListenAddr != ":8080" || cfg.MaintenanceInterval != cfg.SweepInterval {
		t.Errorf("defaults differ from SPEC §10: %+v", cfg)
	}
	if cfg.RunnerTokenExpiresIn != 0 || cfg.RunnerTokenRotationGrace != 10*time.Minute {
		t.Errorf("runner tokens expire in %v with a grace of %v, want never and 10m", cfg.RunnerTokenExpiresIn, cfg.RunnerTokenRotationGrace)
	}
	if cfg, err := server.LoadConfig(func(k string) string {
		return map[string]string{"JOBAPI_RUNNER_TOKEN_EXPIRES_IN": "720h", "JOBAPI_RUNNER_TOKEN_ROTATION_GRACE": "0"}[k]
	}); err != nil || cfg.RunnerTokenExpiresIn != 720*time.Hour || cfg.RunnerTokenRotationGrace != 0 {
		t.Errorf("runner token settings 720h and 0: %v %v %v", cfg.RunnerTokenExpiresIn, cfg.RunnerTokenRotationGrace, err)
	}
	for env, bad := range map[string]string{
		"JOBAPI_ACK_TTL": "soon", "JOBAPI_AUTO_RETRY_MAX": "-1", "JOBAPI_TRACE_LIMIT": "4 potatoes",
		"JOBAPI_AUTO_MIGRATE": "maybe", "JOBAPI_SWEEP_INTERVAL": "1ns", "JOBAPI_RATE_LIMIT_JOBS_REQUEST": "many",
		"JOBAPI_RUNNER_TOKEN_EXPIRES_IN": "30s", "JOBAPI_RUNNER_TOKEN_ROTATION_GRACE": "-1m",
	} {
		_, err := server.LoadConfig(func(k string) string {
			if k == env {
				return bad
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%q: error %v, want one naming the variable", env, bad, err)
		}
	}
}

// countedRateLimits are the options of a test that counts rate-limited answers exactly, and
// the start of the window its requests fall in. The budgets are per minute on the clock
// (fixed windows), and a Redis call slower than the limiter's timeout lets the request
// through: on the wall clock, requests straddling a minute's end, or a loaded machine, gave
// more answers than the budget. So the replicas' clock starts at the start of a window (it
// runs at the real pace, less than a minute ahead of it; a test's requests take seconds of
// the window's minute), and their Redis calls may take their time.
func countedRateLimits() (opts jobapitest.Options, window time.Time) {
	realStart := time.Now()
	window = realStart.Truncate(time.Minute).Add(time.Minute)
	clock := func() time.Time { return window.Add(time.Since(realStart)) }
	return jobapitest.Options{Now: clock, RateLimitCallTimeout: 10 * time.Second}, window
}

// Over the per-token budget a runner gets 429 with the headers gitlab-runner's retry
// requester honours (Retry-After seconds, RateLimit-ResetTime RFC 1123), never a 403.
func TestJobRequestRateLimit(t *testing.T) {
	t.Parallel()
	opts, window := countedRateLimits()
	o := opts
	o.Configure = func(c *server.Config) { c.RateLimitJobsRequest = 5 }
	inst := jobapitest.Start(t, o)
	_, token := inst.CreateRunner(t)
	rc := runnerclient.New(inst.URL, token, "s_ratelimit")
	codes := map[int]int{}
	var limited http.Header
	for i := 0; i < 8; i++ {
		_, res, err := rc.RequestJob(context.Background())
		if err != nil {
			t.Fatalf("request %d: %v (a rate limit must never look unhealthy to the runner)", i, err)
		}
		codes[res.Code]++
		if res.Code == http.StatusTooManyRequests {
			limited = res.Header
		}
	}
	if codes[http.StatusNoContent] != 5 || codes[http.StatusTooManyRequests] != 3 {
		t.Fatalf("codes %v, want 5×204 then 3×429", codes)
	}
	retry, err := strconv.Atoi(limited.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Errorf("Retry-After %q, want 1-60 seconds", limited.Get("Retry-After"))
	}
	reset, err := http.ParseTime(limited.Get("RateLimit-ResetTime"))
	if err != nil || !reset.Equal(window.Add(time.Minute)) {
		t.Errorf("RateLimit-ResetTime %q: want the end of the window, %s", limited.Get("RateLimit-ResetTime"), window.Add(time.Minute).Format(http.TimeFormat))
	}
	if limited.Get("RateLimit-Limit") != "5" || limited.Get("RateLimit-Remaining") != "0" {
		t.Errorf("RateLimit-Limit %q Remaining %q, want 5 and 0", limited.Get("RateLimit-Limit"), limited.Get("RateLimit-Remaining"))
	}
	// Another runner has its own budget; a second replica shares this one's.
	_, other := inst.CreateRunner(t)
	if _, res, _ := runnerclient.New(inst.URL, other, "s_other").RequestJob(context.Background()); res.Code != http.StatusNoContent {
		t.Errorf("other runner: %d, want 204", res.Code)
	}
	// A replica decides below half the budget on its own until its count reaches Redis
	// (ratelimit's precision bound), so it may admit up to 5/2 before it refuses.
	replica := inst.Replica(t, opts)
	rrc := runnerclient.New(replica.URL, token, "s_ratelimit")
	for i := 0; ; i++ {
		_, res, _ := rrc.RequestJob(context.Background())
		if res.Code == http.StatusTooManyRequests {
			break
		}
		if i == 5/2 {
			t.Fatalf("same runner on another replica: %d after %d admitted, want 429 (the budget is shared through Redis)", res.Code, i)
		}
	}
	body := scrape(t, inst.URL)
	if !strings.Contains(body, `jobapi_rate_limit_total{outcome="limited",scope="jobs_request"} 3`) ||
		!strings.Contains(body, `jobapi_job_requests_total{result="rate_limited"} 3`) {
		t.Errorf("metrics do not count the 429s:\n%s", grep(body, "rate_limit"))
	}
}

// A scrape after some traffic shows the metrics operators rely on, with sane values.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	inst.EnableTwoPhase(t, 1)
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "a", "script": []string{"true"}})
	rc := runnerclient.New(inst.URL, token, "s_metrics")
	job, _, err := rc.RequestJob(context.Background())
	if err != nil || job == nil {
		t.Fatalf("request: %v %v", job, err)
	}
	if out, err := rc.RunJob(context.Background(), job, runnerclient.FakeShell{}); err != nil || out.Result != runnerclient.Succeeded {
		t.Fatalf("run: %+v %v", out, err)
	}
	if _, err := inst.Sweeper.SweepOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, inst.URL)
	for _, want := range []string{
		`jobapi_http_requests_total{code="201",method="POST",route="/api/v4/jobs/request"} 1`,
		`jobapi_job_requests_total{result="assigned"} 1`,
		`jobapi_assign_to_ack_seconds_count 1`,
		`jobapi_flag_evaluations_total{flag="allow_runner_job_acknowledgement",result="on"} 1`,
		`jobapi_flag_fallbacks_total{flag="allow_runner_job_acknowledgement"} 0`,
		`jobapi_http_request_duration_seconds_bucket{method="PUT",route="/api/v4/jobs/{job_id}"`,
		`jobapi_builds{state="pending"} `,
		`jobapi_long_poll_waiters 0`,
		`jobapi_pipeline_waiters 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, fmt.Sprintf("/jobs/%d", job.ID)) {
		t.Error("a job id appears in a metric label: cardinality must stay bounded")
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(body, word string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Job ids are sequential: anyone could send PUTs and trace PATCHes with a bogus token to a
// job and spend its per-job budget, so that the real runner's ack, trace and final update
// got 429 until the window reset. Failed token checks must never spend a job's budget.
func TestBogusJobTokensDoNotSpendTheJobsBudget(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.RateLimitJobUpdates = 5 }})
	_, token := inst.CreateRunner(t)
	inst.EnableTwoPhase(t, 1)
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "a", "script": []string{"true"}})
	ctx := context.Background()
	rc := runnerclient.New(inst.URL, token, "s_victim")
	job, _, err := rc.RequestJob(ctx)
	if err != nil || job == nil {
		t.Fatalf("request: %v %v", job, err)
	}
	attack := func(method, path string, body string, hdr ...string) int {
		req, _ := http.NewRequest(method, inst.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	jobPath := fmt.Sprintf("/api/v4/jobs/%d", job.ID)
	for i := 0; i < 20; i++ {
		for _, code := range []int{
			attack("PUT", jobPath, `{"state":"failed"}`, "JOB-TOKEN", "glcbt-bogus", "Content-Type", "application/json"),
			attack("PUT", jobPath, `{"state":"running","token":"glcbt-other"}`, "Content-Type", "application/json"),
			attack("PATCH", jobPath+"/trace", "x", "JOB-TOKEN", "glcbt-bogus", "Content-Range", "0-0"),
		} {
			if code != http.StatusForbidden && code != http.StatusTooManyRequests {
				t.Fatalf("bogus token: %d, want 403 or 429", code)
			}
		}
	}
	if res, err := rc.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}); err != nil || res.Code != http.StatusOK {
		t.Fatalf("the runner's ack after the flood: %d %v, want 200", res.Code, err)
	}
	if res, err := rc.PatchTrace(ctx, job, 0, []byte("hello\n")); err != nil || res.Code != http.StatusAccepted {
		t.Fatalf("the runner's trace after the flood: %d %v, want 202", res.Code, err)
	}
	if res, err := rc.UpdateJob(ctx, job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil || res.Code != http.StatusOK {
		t.Fatalf("the runner's final update after the flood: %d %v, want 200", res.Code, err)
	}
	if d := inst.Job(t, 1, job.ID); d.Status != "success" {
		t.Errorf("job %s, want success", d.Status)
	}
}

// Wrong job tokens are counted per client address, in their own bucket: past it they get
// 429 (never reaching Postgres), while the runner's own requests from the same address,
// with the right token, go on.
func TestJobTokenFailuresLimitedPerAddress(t *testing.T) {
	t.Parallel()
	opts, _ := countedRateLimits()
	opts.Configure = func(c *server.Config) { c.RateLimitJobTokenFailures = 3 }
	inst := jobapitest.Start(t, opts)
	_, token := inst.CreateRunner(t)
	inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "a", "script": []string{"true"}})
	ctx := context.Background()
	rc := runnerclient.New(inst.URL, token, "s_neighbour")
	job, _, err := rc.RequestJob(ctx)
	if err != nil || job == nil {
		t.Fatalf("request: %v %v", job, err)
	}
	var codes []int
	for i := 0; i < 5; i++ {
		bogus := *job
		bogus.Token = "glcbt-bogus"
		res, err := rc.UpdateJob(ctx, &bogus, runnerclient.StateRunning, runnerclient.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, res.Code)
	}
	if fmt.Sprint(codes) != "[403 403 403 429 429]" {
		t.Errorf("bogus tokens got %v, want 3×403 then 429", codes)
	}
	if res, err := rc.UpdateJob(ctx, job, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil || res.Code != http.StatusOK {
		t.Fatalf("the runner's final update: %d %v, want 200", res.Code, err)
	}
	if body := scrape(t, inst.URL); !strings.Contains(body, `jobapi_rate_limit_total{outcome="limited",scope="job_token_failure"} 2`) {
		t.Errorf("metrics do not count the 429s:\n%s", grep(body, "rate_limit"))
	}
}

// POST /runners/verify is rate-limited per token like the other runner endpoints: it
// upserts a manager row each time, and had no limit at all.
func TestVerifyRateLimit(t *testing.T) {
	t.Parallel()
	opts, _ := countedRateLimits()
	inst := jobapitest.Start(t, opts)
	_, token := inst.CreateRunner(t)
	codes := map[int]int{}
	for i := 0; i < 70; i++ {
		_, err := runnerclient.New(inst.URL, token, "s_verify").Verify(context.Background())
		var se *runnerclient.StatusError
		switch {
		case err == nil:
			codes[http.StatusOK]++
		case errors.As(err, &se):
			codes[se.Code]++
		default:
			t.Fatal(err)
		}
	}
	if codes[http.StatusOK] != 60 || codes[http.StatusTooManyRequests] != 10 {
		t.Errorf("codes %v, want 60×200 then 10×429 (the default budget is 60 per minute)", codes)
	}
}
