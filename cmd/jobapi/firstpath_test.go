package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

// firstPathCI is the .gitlab-ci.yml of the repository README's first path starts from: two
// stages, the second reading a file of the repository.
const firstPathCI = `stages: [build, test]

build:
  stage: build
  script:
    - echo "building $CI_PROJECT_NAME at $CI_COMMIT_SHORT_SHA"

unit:
  stage: test
  script:
    - grep hello README.md
`

// TestReadmeFirstPath follows README's "From a repository to a real runner" as written:
// jobapi dev; a runner registered with the registration token dev prints; a project whose
// repo_url is a real git repository; a pipeline of main, whose .gitlab-ci.yml jobapi reads;
// jobapi wait until it succeeds, and the job log. The runner is the real gitlab-runner (shell
// executor) when GITLAB_RUNNER_BIN names one, and runnerclient otherwise, which plays
// gitlab-runner's wire protocol and here runs the scripts with sh after cloning as the
// shell executor does.
//
// Not parallel: jobapi dev installs its flag provider in the process's one OpenFeature
// domain, which the other dev tests replace while they run.
func TestReadmeFirstPath(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (Debian: apt-get install git)")
	}
	readmeSays(t,
		"go run ./cmd/jobapi dev",
		"gitlab-runner register --non-interactive --url http://127.0.0.1:8080 \\\n  --registration-token jobapi-dev-registration-token --executor shell",
		"gitlab-runner run\n",
		`curl -s -H "$A" -X POST $U/api/v4/projects -d name=myapp -d repo_url=file://`,
		`curl -s -H "$A" -X POST "$U/api/v4/projects/1/pipeline?ref=main"`,
		"JOBAPI_URL=$U JOBAPI_ADMIN_TOKEN=jobapi-dev-admin-token go run ./cmd/jobapi wait 1 1",
		`curl -s -H "$A" $U/api/v4/projects/1/jobs/2/trace`)
	repo := firstPathRepo(t)
	sha := gitIn(t, repo, "rev-parse", "HEAD")

	// 1. jobapi dev
	rdb, prefix := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev"}, env(map[string]string{
			"JOBAPI_DATABASE_URL":     testenv.DatabaseURL(t),
			"JOBAPI_REDIS_URL":        fmt.Sprintf("redis://%s/%d", rdb.Options().Addr, rdb.Options().DB),
			"JOBAPI_REDIS_KEY_PREFIX": prefix,
			"JOBAPI_LISTEN_ADDR":      "127.0.0.1:0",
		}), &out, &out)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			t.Error("jobapi dev did not stop")
		}
	})
	base := waitPrinted(t, &out, `running at (http://\S+)`)
	admin := waitPrinted(t, &out, `admin token: (\S+)`)
	registration := waitPrinted(t, &out, `registration token: (\S+)`)
	if !strings.Contains(out.String(), "two-phase commit: ON") {
		t.Errorf("dev does not say two-phase commit is on:\n%s", out.String())
	}

	// 2. a runner registered with the registration token, running
	if bin := os.Getenv("GITLAB_RUNNER_BIN"); bin != "" {
		startRealRunner(t, bin, base, registration)
	} else {
		t.Log("GITLAB_RUNNER_BIN is not set: runnerclient plays gitlab-runner (register --registration-token, run with the shell executor)")
		startRunnerclient(t, base, registration)
	}

	// 3. the project, its repo_url the repository (a working tree; git fetches from it)
	var project struct {
		ID int64 `json:"id"`
	}
	operator(t, base, admin, "POST", "/api/v4/projects", "application/x-www-form-urlencoded",
		url.Values{"name": {"myapp"}, "repo_url": {"file://" + repo}}.Encode(), http.StatusCreated, &project)

	// 4. a pipeline of main: jobapi reads .gitlab-ci.yml from the repository
	var pipeline struct {
		ID  int64  `json:"id"`
		Sha string `json:"sha"`
	}
	operator(t, base, admin, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=main", project.ID), "", "", http.StatusCreated, &pipeline)
	if project.ID != 1 || pipeline.ID != 1 {
		t.Errorf("project %d, pipeline %d: README's commands name project 1 and pipeline 1", project.ID, pipeline.ID)
	}
	if pipeline.Sha != sha {
		t.Errorf("pipeline sha %q, want the repository's main %s", pipeline.Sha, sha)
	}

	// 5. jobapi wait until it ends: success
	var waitOut bytes.Buffer
	waitCtx, stop := context.WithTimeout(ctx, 3*time.Minute)
	defer stop()
	err := run(waitCtx, []string{"wait", strconv.FormatInt(project.ID, 10), strconv.FormatInt(pipeline.ID, 10)},
		env(map[string]string{"JOBAPI_URL": base, "JOBAPI_ADMIN_TOKEN": admin}), &waitOut, &waitOut)
	if err != nil {
		t.Fatalf("jobapi wait: %v\n%s", err, waitOut.String())
	}

	// The jobs ran on the registered runner; unit's log shows the repository's file.
	var jobs []struct {
		ID       int64  `json:"id"`
		Name     string `json:"name"`
		Status   string `json:"status"`
		TwoPhase bool   `json:"two_phase"`
	}
	operator(t, base, admin, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/jobs", project.ID, pipeline.ID), "", "", http.StatusOK, &jobs)
	if len(jobs) != 2 {
		t.Fatalf("jobs %+v, want build and unit", jobs)
	}
	for _, j := range jobs {
		if j.Status != "success" {
			t.Errorf("%s: %s", j.Name, j.Status)
		}
		// runnerclient declares two_phase_job_commit, as gitlab-runner 19.x does; 17.9 does not.
		if os.Getenv("GITLAB_RUNNER_BIN") == "" && !j.TwoPhase {
			t.Errorf("%s ran one-phase: dev's two-phase flag did not apply", j.Name)
		}
		if j.Name != "unit" {
			continue
		}
		if j.ID != 2 {
			t.Errorf("unit is job %d: README shows job 2's log", j.ID)
		}
		var trace string
		operator(t, base, admin, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", project.ID, j.ID), "", "", http.StatusOK, &trace)
		if !strings.Contains(trace, "hello from myapp") {
			t.Errorf("unit's log does not show the repository's README:\n%s", trace)
		}
	}
}

// readmeSays requires README.md's first path to hold each command this test follows.
func readmeSays(t *testing.T, commands ...string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, path, _ := strings.Cut(string(b), "## From a repository to a real runner")
	path, _, _ = strings.Cut(path, "\n## ")
	for _, c := range commands {
		if !strings.Contains(path, c) {
			t.Errorf("README's first path no longer says %q: update the README or this test", c)
		}
	}
}

// firstPathRepo is a repository as a user has it: a working tree on main with a README and
// the .gitlab-ci.yml, committed.
func firstPathRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "myapp")
	gitIn(t, filepath.Dir(dir), "init", "--quiet", "--initial-branch=main", dir)
	for name, text := range map[string]string{"README.md": "hello from myapp\n", ".gitlab-ci.yml": firstPathCI} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "--quiet", "-m", "first")
	return dir
}

// gitEnv is git without the user's or the system's configuration.
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=jobapi", "GIT_AUTHOR_EMAIL=jobapi@example.com", "GIT_COMMITTER_NAME=jobapi", "GIT_COMMITTER_EMAIL=jobapi@example.com")
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, gitEnv()
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return strings.TrimSpace(string(b))
}

// waitPrinted waits until out matches re and returns its first group.
func waitPrinted(t *testing.T, out *testenv.Buffer, re string) string {
	t.Helper()
	r := regexp.MustCompile(re)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := r.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobapi dev did not print %s:\n%s", re, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// operator sends an operator API request with the admin token, requires want and decodes
// the answer into out (a *string takes the body as it is).
func operator(t *testing.T, base, admin, method, path, contentType, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("PRIVATE-TOKEN", admin)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if s, ok := out.(*string); ok {
		*s = string(b)
		return
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, b)
	}
}

// startRealRunner registers gitlab-runner with the registration token, as README says, and
// runs it until the test ends.
func startRealRunner(t *testing.T, bin, base, registration string) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.toml")
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{args[0], "--config", config}, args[1:]...)...)
		cmd.Dir, cmd.Env = dir, append(gitEnv(), "HOME="+dir)
		return cmd
	}
	if b, err := command("register", "--non-interactive", "--url", base, "--registration-token", registration,
		"--executor", "shell", "--description", "my-laptop").CombinedOutput(); err != nil {
		t.Fatalf("gitlab-runner register: %v\n%s", err, b)
	}
	runner := command("run", "--working-directory", dir)
	var out testenv.Buffer
	runner.Stdout, runner.Stderr = &out, &out
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = runner.Process.Signal(syscall.SIGQUIT)
		stopped := make(chan error, 1)
		go func() { stopped <- runner.Wait() }()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			_ = runner.Process.Kill()
		}
		if t.Failed() {
			t.Logf("gitlab-runner run:\n%s", out.String())
		}
	})
}

// startRunnerclient registers with the registration token and takes and runs jobs until the
// test ends, as gitlab-runner run does.
func startRunnerclient(t *testing.T, base, registration string) {
	ctx, cancel := context.WithCancel(context.Background())
	c := runnerclient.New(base, "", "s_firstpath")
	c.MaxWait = 50 * time.Millisecond
	if err := c.RegisterCommand(ctx, registration, runnerclient.RegisterParameters{Description: "my-laptop", RunUntagged: true}); err != nil {
		cancel()
		t.Fatalf("register with the registration token: %v", err)
	}
	executor := shellExecutor{dir: t.TempDir()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			job, _, err := c.RequestJob(ctx)
			if err != nil || job == nil {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if _, err := c.RunJob(ctx, job, executor); err != nil && ctx.Err() == nil {
				t.Errorf("run job %d: %v", job.ID, err)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// shellExecutor does what gitlab-runner's shell executor does with a job, as far as this
// path needs: fetch the job's commit from git_info.repo_url into a directory of its own, then
// run each script line with sh there, the job's variables in its environment.
type shellExecutor struct{ dir string }

func (e shellExecutor) Run(ctx context.Context, job *runnerclient.Job, step runnerclient.Step, out io.Writer) error {
	dir := filepath.Join(e.dir, strconv.FormatInt(job.ID, 10))
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		g := job.GitInfo
		for _, args := range [][]string{
			{"init", "--quiet", dir},
			{"-C", dir, "fetch", "--quiet", g.RepoURL, g.Sha},
			{"-C", dir, "checkout", "--quiet", "--force", g.Sha},
		} {
			if b, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
				fmt.Fprintf(out, "git %s: %s\n", strings.Join(args, " "), b)
				return &runnerclient.ExitError{Code: 1}
			}
		}
	}
	vars := os.Environ()
	for _, v := range job.Variables {
		vars = append(vars, v.Key+"="+v.Value)
	}
	for _, line := range step.Script {
		fmt.Fprintf(out, "$ %s\n", line)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, vars, out, out
		if err := cmd.Run(); err != nil {
			code := 1
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			}
			return &runnerclient.ExitError{Code: code}
		}
	}
	return nil
}
