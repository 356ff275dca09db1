// Package sourcetest_test checks that a job's git_info is enough to get its sources: a real
// bare repository on disk, a project with its file:// remote, a pipeline, and a runner
// (runnerclient) that fetches and checks out the job's commit with the real git, as
// gitlab-runner's get_sources stage does.
package sourcetest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// git runs git in dir with a fixed identity and no user or system config.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return jobapitest.Git(t, dir, args...)
}

// bareRepo makes a bare repository with two commits on branch main and a tag v1.0 on the
// first; it returns the repository's path and the two commits.
func bareRepo(t *testing.T) (bare, first, second string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	bare = filepath.Join(root, "app.git")
	work := filepath.Join(root, "work")
	git(t, root, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	git(t, root, "init", "--quiet", "--initial-branch=main", work)
	if err := os.WriteFile(filepath.Join(work, "VERSION"), []byte("1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "add", "VERSION")
	git(t, work, "commit", "--quiet", "-m", "first")
	first = git(t, work, "rev-parse", "HEAD")
	git(t, work, "tag", "v1.0")
	if err := os.WriteFile(filepath.Join(work, "VERSION"), []byte("2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "commit", "--quiet", "-am", "second")
	second = git(t, work, "rev-parse", "HEAD")
	git(t, work, "push", "--quiet", bare, "main", "v1.0")
	return bare, first, second
}

// gitExecutor plays the shell executor's get_sources, then runs no script: it fetches the
// job's refspecs from git_info.repo_url at git_info.depth into a fresh directory, checks
// out git_info.sha, and prints VERSION; with diff, also what changed since
// CI_COMMIT_BEFORE_SHA, as a script of a push pipeline would. A failing git command fails
// the step.
type gitExecutor struct {
	dir  string
	diff bool
}

func (e gitExecutor) Run(ctx context.Context, job *runnerclient.Job, step runnerclient.Step, out io.Writer) error {
	if step.Name != "script" {
		return nil
	}
	g := job.GitInfo
	dir := filepath.Join(e.dir, strconv.FormatInt(job.ID, 10))
	steps := [][]string{
		{"init", "--quiet", dir},
		{"-C", dir, "remote", "add", "origin", g.RepoURL},
		append([]string{"-C", dir, "fetch", "--quiet", "--depth", strconv.Itoa(g.Depth), "origin"}, g.Refspecs...),
		{"-C", dir, "checkout", "--quiet", "--force", g.Sha},
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		fmt.Fprintf(out, "$ git %s\n", strings.Join(args[min(2, len(args)):], " "))
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(out, "%s\n", buf.Bytes())
			return &runnerclient.ExitError{Code: 1}
		}
	}
	version, err := os.ReadFile(filepath.Join(dir, "VERSION"))
	if err != nil {
		return &runnerclient.ExitError{Code: 1}
	}
	head, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return &runnerclient.ExitError{Code: 1}
	}
	fmt.Fprintf(out, "HEAD %s VERSION %s", strings.TrimSpace(string(head)), version)
	if e.diff {
		before, _ := job.Variable("CI_COMMIT_BEFORE_SHA")
		if before != g.BeforeSha {
			fmt.Fprintf(out, "CI_COMMIT_BEFORE_SHA %s, git_info.before_sha %s\n", before, g.BeforeSha)
			return &runnerclient.ExitError{Code: 1}
		}
		changed, err := exec.Command("git", "-C", dir, "diff", "--name-only", before, g.Sha).CombinedOutput()
		if err != nil {
			fmt.Fprintf(out, "%s\n", changed)
			return &runnerclient.ExitError{Code: 1}
		}
		fmt.Fprintf(out, "CHANGED %s\n", strings.Join(strings.Fields(string(changed)), " "))
	}
	return nil
}

// TestJobClonesProjectRepository: the payload of a project with a file:// remote lets git
// fetch and check out the pipeline's commit, for a branch (an older commit than its tip) and
// for a tag.
func TestJobClonesProjectRepository(t *testing.T) {
	t.Parallel()
	bare, first, second := bareRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects",
		map[string]any{"name": "app", "repo_url": "file://" + bare}, &project)

	cases := []struct {
		ref, sha, version string
	}{
		{"main", second, "2.0"},
		{"refs/tags/v1.0", first, "1.0"},
		{"main", first, "1.0"}, // an older commit of the branch: within the default depth
	}
	rc := runnerclient.New(inst.URL, token, "s_0123456789ab")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sources := gitExecutor{dir: t.TempDir()}
	for _, c := range cases {
		var p api.Pipeline
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID), map[string]any{
			"ref": c.ref, "sha": c.sha, "stages": []string{"build"},
			"jobs": []map[string]any{{"name": "build", "stage": "build", "script": "cat VERSION"}}}, &p)
		if p.GitStrategy != "fetch" {
			t.Errorf("%s: pipeline git_strategy %q, want fetch", c.ref, p.GitStrategy)
		}
		job, res, err := rc.RequestJob(ctx)
		if err != nil || job == nil {
			t.Fatalf("%s: request job: %v (%+v)", c.ref, err, res)
		}
		if job.GitInfo.RepoURL != "file://"+bare || job.GitInfo.Sha != c.sha {
			t.Errorf("%s: git_info %+v, want the file remote and sha %s", c.ref, job.GitInfo, c.sha)
		}
		if v, _ := job.Variable("GIT_STRATEGY"); v != "" {
			t.Errorf("%s: GIT_STRATEGY=%s for a project with a remote", c.ref, v)
		}
		out, err := rc.RunJob(ctx, job, sources)
		if err != nil {
			t.Fatalf("%s: run job: %v", c.ref, err)
		}
		resp, trace := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", project.ID, job.ID), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: trace: %d", c.ref, resp.StatusCode)
		}
		if want := fmt.Sprintf("HEAD %s VERSION %s", c.sha, c.version); !bytes.Contains(trace, []byte(want)) {
			t.Errorf("%s: outcome %v; trace does not show %q:\n%s", c.ref, out.Result, want, trace)
		}
		if j := inst.Job(t, project.ID, job.ID); j.Status != "success" {
			t.Errorf("%s: job %s, want success", c.ref, j.Status)
		}
	}
}

// TestPushPipelineKnowsTheCommitBefore: a pipeline created for a push (source push,
// before_sha the ref's previous tip) gives its job a before_sha that git knows after the
// job's own fetch, so a script can list what the push changed; CI_PIPELINE_SOURCE says push.
func TestPushPipelineKnowsTheCommitBefore(t *testing.T) {
	t.Parallel()
	bare, first, second := bareRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, token := inst.CreateRunner(t)
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects",
		map[string]any{"name": "app", "repo_url": "file://" + bare}, &project)
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID), map[string]any{
		"ref": "main", "sha": second, "before_sha": first, "source": "push", "stages": []string{"build"},
		"jobs": []map[string]any{{"name": "changes", "stage": "build", "script": "git diff --name-only $CI_COMMIT_BEFORE_SHA $CI_COMMIT_SHA"}}}, nil)

	rc := runnerclient.New(inst.URL, token, "s_0123456789ab")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, res, err := rc.RequestJob(ctx)
	if err != nil || job == nil {
		t.Fatalf("request job: %v (%+v)", err, res)
	}
	if src, _ := job.Variable("CI_PIPELINE_SOURCE"); src != "push" || job.GitInfo.BeforeSha != first {
		t.Errorf("CI_PIPELINE_SOURCE %q, git_info.before_sha %q; want push and %s", src, job.GitInfo.BeforeSha, first)
	}
	if _, err := rc.RunJob(ctx, job, gitExecutor{dir: t.TempDir(), diff: true}); err != nil {
		t.Fatalf("run job: %v", err)
	}
	_, trace := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/trace", project.ID, job.ID), nil)
	if !bytes.Contains(trace, []byte("CHANGED VERSION\n")) {
		t.Errorf("trace does not show the push's change to VERSION:\n%s", trace)
	}
	if j := inst.Job(t, project.ID, job.ID); j.Status != "success" {
		t.Errorf("job %s, want success", j.Status)
	}
}

// monorepo is a work tree and its bare remote, the project repository the tests commit to.
type monorepo = jobapitest.GitRepo

func newMonorepo(t *testing.T) *monorepo { return jobapitest.NewGitRepo(t) }
