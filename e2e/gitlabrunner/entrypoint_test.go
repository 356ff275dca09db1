package gitlabrunner_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// The compose service's entrypoint with a real gitlab-runner (GITLAB_RUNNER_BIN) against a
// real jobapi, as the container runs it: it registers with the registration token (a
// glrtr- runner whose expiring token lands in config.toml), runs a job with the shell
// executor, and on SIGTERM drains and unregisters, which deletes the runner.
func TestEntrypointWithRealRunner(t *testing.T) {
	bin := os.Getenv("GITLAB_RUNNER_BIN")
	if bin == "" {
		t.Skip("GITLAB_RUNNER_BIN is not set: the entrypoint was not run with a real gitlab-runner")
	}
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.RunnerRegistrationToken = "compose-registration-token"
		c.RunnerTokenExpiresIn = 24 * time.Hour
	}})
	dir := t.TempDir()
	config := filepath.Join(dir, "config.toml")
	cmd := exec.Command("bash", filepath.Join(jobapitest.ModuleRoot(t), "deploy", "gitlab-runner", "entrypoint.sh"))
	cmd.Env = append(os.Environ(),
		"REGISTRATION_TOKEN=compose-registration-token", "CI_SERVER_URL="+inst.URL, "RUNNER_NAME=entrypoint-test",
		"RUNNER_USER=", "RUNNER_WORKING_DIRECTORY="+dir, "CONFIG_FILE="+config, "GITLAB_RUNNER="+bin,
		"DRAIN_TIMEOUT=30", "HOME="+dir)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() || testing.Verbose() {
			t.Logf("entrypoint output:\n%s", out.String())
		}
	})

	var runners []api.Runner
	testenv.Eventually(t, 60*time.Second, "the runner registered", func() bool {
		runners = nil
		inst.MustDo(t, http.StatusOK, "GET", "/api/v4/runners", nil, &runners)
		return len(runners) == 1
	})
	if runners[0].Description != "entrypoint-test" || !runners[0].RunUntagged {
		t.Errorf("registered runner %+v", runners[0])
	}
	// gitlab-runner writes config.toml after jobapi's answer.
	var toml []byte
	testenv.Eventually(t, 30*time.Second, "config.toml holds a glrtr- token with its expiry", func() bool {
		toml, _ = os.ReadFile(config)
		return strings.Contains(string(toml), `token = "glrtr-`) && strings.Contains(string(toml), "token_expires_at = 20")
	})

	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "hello", "stage": "test",
		"script": []string{"echo hello from $CI_JOB_NAME on $CI_RUNNER_DESCRIPTION"}})
	job := inst.WaitJobStatus(t, 1, p.Jobs[0].ID, "success", 90*time.Second)
	resp, trace := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", job.ID), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(trace), "hello from hello on entrypoint-test") {
		t.Errorf("trace of the job: %d\n%s", resp.StatusCode, trace)
	}

	// docker compose stop: SIGTERM to the entrypoint.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("entrypoint exited with %v, want 0", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the entrypoint did not stop within 90 s of SIGTERM")
	}
	runners = nil
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/runners", nil, &runners)
	if len(runners) != 0 {
		t.Errorf("runners after the stop: %+v, want none (unregister deletes a glrtr- runner)", runners)
	}
	if toml, _ := os.ReadFile(config); strings.Contains(string(toml), "glrtr-") {
		t.Errorf("config.toml still holds the runner after unregister:\n%s", toml)
	}
}
