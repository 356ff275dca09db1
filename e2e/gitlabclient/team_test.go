// Package gitlabclient_test runs a real GitLab API client, Debian's python-gitlab 3.12, against
// `jobapi dev` the way a team's script uses GitLab: a project on a real git repository,
// pipelines from its .gitlab-ci.yml, their jobs run by a runner to the end, then every read and
// control call of GitLab's pipelines, jobs, runners, statuses, artifacts, triggers, schedules
// and hooks APIs on what ran.
package gitlabclient_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ciConfig is the repository's .gitlab-ci.yml: build leaves an archive, unit and lint test.
const ciConfig = `stages: [build, test]
build:
  stage: build
  script: make
  artifacts:
    paths: [out/]
unit:
  stage: test
  script: make test
lint:
  stage: test
  script: make lint
`

// TestTeamScript runs testdata/team_script.py, python-gitlab against `jobapi dev` (the
// binary built from this checkout, on the test's database and Redis). The script asks the
// test, over its stdin and stdout, for what a team's script does not do itself: a runner
// that runs the pending jobs (dev's demo runner, played with runnerclient) and a push to the
// repository. Every call the script makes and what it answered is in the test's log.
func TestTeamScript(t *testing.T) {
	python := jobapitest.PythonGitlab(t)
	repo := jobapitest.NewGitRepo(t)
	head := repo.Commit(map[string]string{".gitlab-ci.yml": ciConfig, "README.md": "app\n"})
	jobapitest.Git(t, repo.Work, "checkout", "--quiet", "-b", "feature")
	feature := repo.Commit(map[string]string{"feature.txt": "a feature\n"})
	jobapitest.Git(t, repo.Work, "checkout", "--quiet", "main")

	dev := startDev(t, jobapitest.BuildJobapi(t))
	run := jobapitest.NewRunner(t, dev.url, dev.runnerToken, "s_team")

	cmd := exec.Command(python, "testdata/team_script.py", dev.url, dev.admin, "file://"+repo.Bare, head, feature,
		strconv.FormatInt(dev.runnerID, 10))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	sawOK := false
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		req, isRequest := strings.CutPrefix(line, "@@ ")
		if !isRequest {
			t.Log(line)
			sawOK = sawOK || line == "ok"
			continue
		}
		var r request
		if err := json.Unmarshal([]byte(req), &r); err != nil {
			t.Fatalf("the script asked %q: %v", req, err)
		}
		var answer any
		switch r.Action {
		case "run":
			answer = runJobs(t, dev, run, r)
		case "push":
			answer = map[string]string{"sha": repo.Commit(map[string]string{"CHANGES": r.Change + "\n"})}
		default:
			t.Fatalf("the script asked for %q", r.Action)
		}
		b, _ := json.Marshal(answer)
		if _, err := fmt.Fprintf(stdin, "%s\n", b); err != nil {
			t.Fatalf("answer the script: %v\n%s", err, stderr.String())
		}
	}
	err = cmd.Wait()
	if err != nil || !sawOK {
		t.Fatalf("python-gitlab script: %v\n%s", err, stderr.String())
	}
}

// request is what the script asks of the test.
type request struct {
	Action    string   `json:"action"`
	Project   int64    `json:"project"`
	Pipelines []int64  `json:"pipelines"` // run: until these are finished
	Fail      []string `json:"fail"`      // run: the jobs of these names fail
	Change    string   `json:"change"`    // push: a line for the new commit
}

// ranJob is what the runner did with one job, for the script to check against the API.
type ranJob struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Pipeline int64  `json:"pipeline"`
	Status   string `json:"status"`
}

// runJobs plays the runner until every pipeline named is finished and no job is left: each
// job logs a line, build uploads out/VERSION (its pipeline's id) as its archive, and the jobs
// named in r.Fail fail.
func runJobs(t *testing.T, dev *devInstance, run *jobapitest.Runner, r request) []ranJob {
	t.Helper()
	var ran []ranJob
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		job, res, err := run.RequestJob(context.Background())
		if err != nil {
			t.Fatalf("request job: %v", err)
		}
		if res.Code == http.StatusCreated {
			ran = append(ran, runJob(t, run, job, slices.Contains(r.Fail, job.JobInfo.Name)))
			continue
		}
		if res.Code != http.StatusNoContent {
			t.Fatalf("request job: %d %s", res.Code, res.Message)
		}
		if dev.allFinished(t, r.Project, r.Pipelines) {
			return ran
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pipelines %v of project %d not finished after 2 minutes; ran %+v", r.Pipelines, r.Project, ran)
	return nil
}

func runJob(t *testing.T, run *jobapitest.Runner, job *runnerclient.Job, fail bool) ranJob {
	t.Helper()
	name, pipeline := job.JobInfo.Name, job.JobInfo.PipelineID
	// dev turns two-phase commit on, and runnerclient declares it as gitlab-runner 19.x does:
	// the job is the runner's once it acknowledges it.
	if res := run.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}); res.Code != http.StatusOK {
		t.Fatalf("acknowledge %s (%d): %+v", name, job.ID, res)
	}
	log := fmt.Sprintf("$ make %s\nrunning %s of pipeline %d\n", name, name, pipeline)
	if p := run.Patch(t, job, 0, log); p.State != runnerclient.PatchSucceeded {
		t.Fatalf("trace of %s (%d): %+v", name, job.ID, p)
	}
	if name == "build" {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		f, err := zw.Create("out/VERSION")
		if err == nil {
			_, err = io.WriteString(f, fmt.Sprintf("%d\n", pipeline))
		}
		if err == nil {
			err = zw.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		up, err := run.UploadArtifacts(context.Background(), job, runnerclient.BytesContent(buf.Bytes()),
			runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip, Type: runnerclient.ArtifactTypeArchive})
		if err != nil || up.Code != http.StatusCreated {
			t.Fatalf("upload build's archive: %+v %v", up, err)
		}
	}
	// A job takes time: GitLab's duration is started to finished, and a script reads it.
	time.Sleep(50 * time.Millisecond)
	state, reason := runnerclient.StateSuccess, ""
	if fail {
		state, reason = runnerclient.StateFailed, "script_failure"
	}
	run.Finish(t, job, state, reason)
	return ranJob{ID: job.ID, Name: name, Pipeline: pipeline, Status: state}
}

// devInstance is a running `jobapi dev` as its output describes it.
type devInstance struct {
	url, admin, runnerToken string
	runnerID                int64
}

// allFinished reads the pipelines as the operator does.
func (d *devInstance) allFinished(t *testing.T, project int64, ids []int64) bool {
	t.Helper()
	for _, id := range ids {
		resp, body := jobapitest.Send(t, d.url, "GET", jobapitest.PipelinePath(project, id), nil, "PRIVATE-TOKEN", d.admin)
		var p struct {
			Status string `json:"status"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &p) != nil {
			t.Fatalf("pipeline %d: %d %s", id, resp.StatusCode, body)
		}
		if !slices.Contains([]string{"success", "failed", "canceled", "skipped"}, p.Status) {
			return false
		}
	}
	return true
}

// startDev runs `jobapi dev` on the test's database and Redis, on a free port, and reads
// its URL, admin token and demo runner from what it prints.
func startDev(t *testing.T, bin string) *devInstance {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBAPI_") {
			environ = append(environ, kv)
		}
	}
	environ = append(environ,
		"JOBAPI_DATABASE_URL="+testenv.DatabaseURL(t),
		fmt.Sprintf("JOBAPI_REDIS_URL=redis://%s/%d", rdb.Options().Addr, rdb.Options().DB),
		"JOBAPI_REDIS_KEY_PREFIX="+prefix,
		"JOBAPI_LISTEN_ADDR=127.0.0.1:0",
		"JOBAPI_DATABASE_MAX_CONNS=5")
	var out testenv.Buffer
	cmd := exec.Command(bin, "dev")
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Interrupted, as Ctrl-C stops it: it removes its temporary folder.
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("jobapi dev's output:\n%s", out.String())
		}
	})
	printed := func(pattern string) string {
		re := regexp.MustCompile(pattern)
		deadline := time.Now().Add(60 * time.Second)
		for {
			if m := re.FindStringSubmatch(out.String()); m != nil {
				return m[1]
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobapi dev did not print %q within 60 s:\n%s", pattern, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	d := &devInstance{url: printed(`running at (http://\S+)`), admin: printed(`admin token: (\S+)`)}
	d.runnerToken = printed(`demo runner: id \d+, token (\S+)`)
	id, err := strconv.ParseInt(printed(`demo runner: id (\d+),`), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	d.runnerID = id
	return d
}
