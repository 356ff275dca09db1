package sourcetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// goldenJob is what the corpus's golden files say of a job (testdata/ci/*.golden.json):
// the compiled graph, checked there against GitLab's rules.
type goldenJob struct {
	Name          string `json:"name"`
	Stage         string `json:"stage"`
	When          string `json:"when"`
	AllowFailure  bool   `json:"allow_failure"`
	NeedsDeclared bool   `json:"needs_declared"`
	Needs         []struct {
		Job string `json:"job"`
	} `json:"needs"`
}

func readGolden(t *testing.T, name string) (stages []string, jobs []goldenJob) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(jobapitest.ModuleRoot(t), "testdata", "ci", name+".golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Stages []string    `json:"stages"`
			Jobs   []goldenJob `json:"jobs"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil || len(g.Cases) == 0 {
		t.Fatalf("golden %s: %v", name, err)
	}
	return g.Cases[0].Stages, g.Cases[0].Jobs
}

// expectedRounds is the test's own model of GitLab's processing, independent of jobapi's:
// a job is decided once every predecessor (its needs, else every job of earlier stages) is
// done; on_success runs when none failed (allow_failure failures count as passed),
// on_failure when one did, always in any case; otherwise it is skipped at once. Jobs run in
// rounds: all that became runnable, then all their outcomes.
func expectedRounds(stages []string, jobs []goldenJob, fails map[string]bool) (rounds [][]string, final map[string]string) {
	stageIdx := map[string]int{}
	for i, s := range stages {
		stageIdx[s] = i
	}
	preds := map[string][]goldenJob{}
	for _, j := range jobs {
		for _, p := range jobs {
			if j.NeedsDeclared && slices.ContainsFunc(j.Needs, func(n struct {
				Job string `json:"job"`
			}) bool {
				return n.Job == p.Name
			}) || !j.NeedsDeclared && stageIdx[p.Stage] < stageIdx[j.Stage] {
				preds[j.Name] = append(preds[j.Name], p)
			}
		}
	}
	final = map[string]string{}
	for len(final) < len(jobs) {
		var round []string
		for changed := true; changed; {
			changed = false
			for _, j := range jobs {
				if final[j.Name] != "" || slices.Contains(round, j.Name) {
					continue
				}
				failed, ready := false, true
				for _, p := range preds[j.Name] {
					switch st := final[p.Name]; {
					case st == "" || st == "running":
						ready = false
					case st == "failed" && !p.AllowFailure:
						failed = true
					}
				}
				if !ready {
					continue
				}
				run := j.When == "always" || j.When == "on_failure" && failed || j.When == "on_success" && !failed
				if !run {
					final[j.Name], changed = "skipped", true
					continue
				}
				final[j.Name] = "running"
				round = append(round, j.Name)
			}
		}
		if len(round) == 0 {
			break
		}
		for _, name := range round {
			final[name] = "success"
			if fails[name] {
				final[name] = "failed"
			}
		}
		sort.Strings(round)
		rounds = append(rounds, round)
	}
	return rounds, final
}

// failingGit runs gitExecutor's checkout, then fails the script of the named jobs.
type failingGit struct {
	gitExecutor
	fails map[string]bool
}

func (e failingGit) Run(ctx context.Context, job *runnerclient.Job, step runnerclient.Step, out io.Writer) error {
	if err := e.gitExecutor.Run(ctx, job, step, out); err != nil || step.Name != "script" {
		return err
	}
	if e.fails[job.JobInfo.Name] {
		fmt.Fprintln(out, "failing on purpose")
		return &runnerclient.ExitError{Code: 1}
	}
	return nil
}

// TestCorpusPipelineRunsInDAGOrder: a pipeline from the corpus's DAG file, created over HTTP
// for a project whose file:// repository holds that file, is run by a runner that clones
// every job's commit; the jobs it is handed, round by round, are the ones GitLab's rules
// make runnable (needs across stages, needs: [], stage order, on_failure and always), and
// every job ends as the model says. Once with every job passing, once with a stage-order
// job failing.
func TestCorpusPipelineRunsInDAGOrder(t *testing.T) {
	t.Parallel()
	stages, golden := readGolden(t, "dag")
	config, err := os.ReadFile(filepath.Join(jobapitest.ModuleRoot(t), "testdata", "ci", "dag.yml"))
	if err != nil {
		t.Fatal(err)
	}
	bare, _, sha := bareRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects",
		map[string]any{"name": "dag", "repo_url": "file://" + bare}, &project)

	for _, fails := range []map[string]bool{{}, {"integration": true}} {
		t.Run(fmt.Sprintf("failing %v", slices.Sorted(func(yield func(string) bool) {
			for k := range fails {
				if !yield(k) {
					return
				}
			}
		})), func(t *testing.T) {
			wantRounds, wantFinal := expectedRounds(stages, golden, fails)
			resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=main&sha=%s", project.ID, sha),
				string(config), "Content-Type", "application/yaml")
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("create pipeline: %d %s", resp.StatusCode, b)
			}
			var p api.Pipeline
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			_, token := inst.CreateRunner(t)
			rc := runnerclient.New(inst.URL, token, "s_dag0123456789")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			exec := failingGit{gitExecutor: gitExecutor{dir: t.TempDir()}, fails: fails}

			var rounds [][]string
			for range len(golden) + 1 {
				var round []*runnerclient.Job
				for {
					job, res, err := rc.RequestJob(ctx)
					if err != nil {
						t.Fatalf("request job: %v", err)
					}
					if res.Code == http.StatusNoContent {
						break
					}
					if job == nil {
						t.Fatalf("request job: %d %s", res.Code, res.Message)
					}
					round = append(round, job)
				}
				if len(round) == 0 {
					break
				}
				var names []string
				for _, job := range round {
					names = append(names, job.JobInfo.Name)
					if job.GitInfo.Sha != sha || job.GitInfo.RepoURL != "file://"+bare {
						t.Errorf("%s: git_info %+v, want the project's remote at %s", job.JobInfo.Name, job.GitInfo, sha)
					}
					if _, err := rc.RunJob(ctx, job, exec); err != nil {
						t.Fatalf("run %s: %v", job.JobInfo.Name, err)
					}
				}
				sort.Strings(names)
				rounds = append(rounds, names)
			}
			t.Logf("rounds: %v", rounds)
			if fmt.Sprint(rounds) != fmt.Sprint(wantRounds) {
				t.Errorf("jobs handed out by round:\n got %v\nwant %v", rounds, wantRounds)
			}
			got := inst.Pipeline(t, p)
			for _, j := range got.Jobs {
				if want := wantFinal[j.Name]; j.Status != want {
					t.Errorf("%s ended %s, want %s", j.Name, j.Status, want)
				}
			}
			wantStatus := "success"
			if len(fails) > 0 {
				wantStatus = "failed"
			}
			if got.Status != wantStatus {
				t.Errorf("pipeline %s, want %s (jobs %s)", got.Status, wantStatus, strings.Join(jobStates(got), ", "))
			}
		})
	}
}

func jobStates(p api.Pipeline) []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.Name+"="+j.Status)
	}
	return out
}
