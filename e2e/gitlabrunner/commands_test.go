package gitlabrunner_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// realRunner runs gitlab-runner commands on one config.toml in a directory of its own.
type realRunner struct {
	t      *testing.T
	bin    string
	dir    string
	config string
}

func newRealRunner(t *testing.T, bin string) *realRunner {
	dir := t.TempDir()
	return &realRunner{t: t, bin: bin, dir: dir, config: filepath.Join(dir, "config.toml")}
}

func (r *realRunner) command(args ...string) *exec.Cmd {
	args = append([]string{args[0], "--config", r.config}, args[1:]...)
	cmd := exec.Command(r.bin, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "HOME="+r.dir)
	return cmd
}

// run runs a command to its end and returns its output and whether it succeeded.
func (r *realRunner) run(args ...string) (string, bool) {
	r.t.Helper()
	out, err := r.command(args...).CombinedOutput()
	return string(out), err == nil
}

func (r *realRunner) mustRun(args ...string) string {
	r.t.Helper()
	out, ok := r.run(args...)
	if !ok {
		r.t.Fatalf("gitlab-runner %s failed:\n%s", strings.Join(args, " "), out)
	}
	return out
}

var tomlToken = regexp.MustCompile(`(?m)^\s*token = "([^"]+)"`)

// token is the runner token config.toml holds.
func (r *realRunner) token() string {
	r.t.Helper()
	b, err := os.ReadFile(r.config)
	if err != nil {
		r.t.Fatal(err)
	}
	m := tomlToken.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// startRealRunner creates a runner named name in inst, registers the real gitlab-runner
// with its token (shell executor) and runs it until the test ends; what it printed is
// logged when the test fails or runs verbose, and out has it meanwhile.
func startRealRunner(t *testing.T, inst *jobapitest.Instance, bin, name string) (created api.RunnerCreated, out *syncBuffer) {
	t.Helper()
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners", map[string]any{"description": name}, &created)
	r := newRealRunner(t, bin)
	r.mustRun("register", "--non-interactive", "--url", inst.URL, "--token", created.Token, "--executor", "shell", "--name", name)
	run := r.command("run", "--working-directory", r.dir)
	out = &syncBuffer{}
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = run.Process.Kill()
		_ = run.Wait()
		if t.Failed() || testing.Verbose() {
			t.Logf("gitlab-runner run:\n%s", out.String())
		}
	})
	return created, out
}

// requests counts the requests a route has answered with code, from jobapi's metrics.
func requests(t *testing.T, inst *jobapitest.Instance, method, route string, code int) float64 {
	t.Helper()
	return inst.Metric(t, fmt.Sprintf(`jobapi_http_requests_total{code="%d",method="%s",route="%s"}`, code, method, route))
}

// docs/runners.md's runner-commands table with the real gitlab-runner v17.9 binary
// (GITLAB_RUNNER_BIN) instead of runnerclient: register --token, verify, run (which rotates
// an expiring token by itself and keeps taking jobs), reset-token with and without --pat,
// unregister of a glrt- runner (one manager; the runner stays), and run with a token past
// its expiry (refused).
func TestRealRunnerCommands(t *testing.T) {
	bin := os.Getenv("GITLAB_RUNNER_BIN")
	if bin == "" {
		t.Skip("GITLAB_RUNNER_BIN is not set: the runner commands were not run with a real gitlab-runner")
	}
	t.Parallel()
	// 8 s tokens: run resets at 6 s. Configure bypasses the 1-minute minimum of the setting.
	const lifetime = 8 * time.Second
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.RunnerTokenExpiresIn, c.RunnerTokenRotationGrace = lifetime, time.Minute
	}})
	var created api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners", map[string]any{"description": "real"}, &created)
	r := newRealRunner(t, bin)

	// register --token glrt-…: POST /runners/verify; config.toml keeps id and expiry.
	r.mustRun("register", "--non-interactive", "--url", inst.URL, "--token", created.Token, "--executor", "shell", "--name", "real")
	toml, _ := os.ReadFile(r.config)
	if r.token() != created.Token || !strings.Contains(string(toml), fmt.Sprintf("id = %d", created.ID)) ||
		!strings.Contains(string(toml), "token_expires_at = 20") {
		t.Fatalf("config.toml after register --token:\n%s", toml)
	}
	if n := requests(t, inst, "POST", "/api/v4/runners/verify", http.StatusOK); n != 1 {
		t.Errorf("register --token sent %v verify requests answered 200, want 1", n)
	}

	// verify: 200 ("is valid").
	if out := r.mustRun("verify"); !strings.Contains(out, "is valid") {
		t.Errorf("verify:\n%s", out)
	}

	// run: before 75 % of the 8 s the runner resets its token itself, writes the new one to
	// config.toml and goes on taking jobs with it.
	first := r.token()
	run := r.command("run", "--working-directory", r.dir)
	out := &syncBuffer{}
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- run.Wait() }()
	t.Cleanup(func() {
		_ = run.Process.Kill()
		if t.Failed() || testing.Verbose() {
			t.Logf("gitlab-runner run:\n%s", out.String())
		}
	})
	testenv.Eventually(t, 30*time.Second, "the runner rotated its token", func() bool { return r.token() != first })
	if n := requests(t, inst, "POST", "/api/v4/runners/reset_authentication_token", http.StatusCreated); n < 1 {
		t.Errorf("%v resets answered 201", n)
	}
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "after-rotation", "stage": "test", "script": []string{"echo rotated"}})
	inst.WaitJobStatus(t, 1, p.Jobs[0].ID, "success", 60*time.Second)
	if err := run.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("gitlab-runner run did not stop on SIGQUIT")
	}

	// reset-token, then reset-token --pat: each writes a new glrt- token.
	before := r.token()
	r.mustRun("reset-token", "--name", "real")
	if got := r.token(); got == before || !strings.HasPrefix(got, "glrt-") {
		t.Errorf("reset-token: token unchanged or not glrt-")
	}
	before = r.token()
	r.mustRun("reset-token", "--name", "real", "--pat", jobapitest.AdminToken)
	if got := r.token(); got == before || !strings.HasPrefix(got, "glrt-") {
		t.Errorf("reset-token --pat: token unchanged or not glrt-")
	}
	if n := requests(t, inst, "POST", "/api/v4/runners/{runner_id}/reset_authentication_token", http.StatusCreated); n != 1 {
		t.Errorf("reset-token --pat: %v operator resets answered 201, want 1", n)
	}

	// run with a token past its expiry: its reset is due at once and refused, and its job
	// requests are refused too.
	time.Sleep(lifetime)
	run = r.command("run", "--working-directory", r.dir)
	out = &syncBuffer{}
	run.Stdout, run.Stderr = out, out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the expired token refused", func() bool {
		return requests(t, inst, "POST", "/api/v4/runners/reset_authentication_token", http.StatusForbidden) >= 1 &&
			requests(t, inst, "POST", "/api/v4/jobs/request", http.StatusForbidden) >= 1
	})
	_ = run.Process.Signal(syscall.SIGQUIT)
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("gitlab-runner run with an expired token did not stop")
	}
	t.Logf("run with an expired token: %v resets and %v job requests answered 403",
		requests(t, inst, "POST", "/api/v4/runners/reset_authentication_token", http.StatusForbidden),
		requests(t, inst, "POST", "/api/v4/jobs/request", http.StatusForbidden))

	// An operator's reset (as an admin would after such an outage) revives it; unregister of
	// a glrt- runner then removes its manager only: the runner stays, as in GitLab.
	r.mustRun("reset-token", "--name", "real", "--pat", jobapitest.AdminToken)
	r.mustRun("verify")
	r.mustRun("unregister", "--name", "real")
	if n := requests(t, inst, "DELETE", "/api/v4/runners/managers", http.StatusNoContent); n != 1 {
		t.Errorf("unregister sent %v DELETE /runners/managers answered 204, want 1", n)
	}
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", created.ID), nil, &rn)
	if len(rn.Managers) != 0 {
		t.Errorf("managers after unregister: %+v", rn.Managers)
	}
}

// An operator deletes a runner whose real gitlab-runner is running a job: the job fails at
// once in jobapi (runner_system_failure), and the runner, told so at its next trace or
// update (403, Job-Status: failed), aborts the job instead of running it to its end.
func TestRealRunnerAbortsJobOfDeletedRunner(t *testing.T) {
	bin := os.Getenv("GITLAB_RUNNER_BIN")
	if bin == "" {
		t.Skip("GITLAB_RUNNER_BIN is not set: no real gitlab-runner ran a job of a deleted runner")
	}
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	created, out := startRealRunner(t, inst, bin, "doomed")

	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "long", "stage": "test",
		"script": []string{"for i in $(seq 1 120); do echo tick $i; sleep 1; done"}})
	id := p.Jobs[0].ID
	testenv.Eventually(t, 60*time.Second, "the job's first ticks in its trace", func() bool {
		_, trace := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", id), nil)
		return strings.Contains(string(trace), "tick 2")
	})
	resp, body := inst.Do(t, "DELETE", fmt.Sprintf("/api/v4/runners/%d", created.ID), nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete the runner: %d %s", resp.StatusCode, body)
	}
	if job := inst.Job(t, 1, id); job.Status != "failed" || jobapitest.Reason(job) != "runner_system_failure" {
		t.Fatalf("job after the delete: %s %q", job.Status, jobapitest.Reason(job))
	}
	// The runner learns it at its next trace PATCH or update (GET trace marks the job
	// watched, which shortens the runner's update interval), and drops the job.
	start := time.Now()
	testenv.Eventually(t, 90*time.Second, "the runner dropped the job", func() bool {
		inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", id), nil)
		return strings.Contains(out.String(), "Removed job from processing list")
	})
	t.Logf("the runner dropped the job %v after the delete", time.Since(start).Round(time.Second))
	if strings.Contains(out.String(), "Job succeeded") {
		t.Error("the runner ran the job of a deleted runner to its end")
	}
}
