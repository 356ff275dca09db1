// Package payloadtest_test compares the whole job JSON jobapi sends gitlab-runner for
// representative jobs with golden files in testdata/, and decodes each into runnerclient's
// mirror of the runner's types, refusing unknown or mistyped fields. Run with -update to
// rewrite the golden files from what jobapi sends (then read the diff).
package payloadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from what jobapi sends")

const (
	sha       = "0123456789abcdef0123456789abcdef01234567"
	beforeSHA = "fedcba9876543210fedcba9876543210fedcba98"
)

// fixture is one replica with a runner and two projects: one with an https remote and CI/CD
// variables, and the implicit project 100 (no row, no repository).
type fixture struct {
	inst    *jobapitest.Instance
	runner  *runnerclient.Client
	project api.Project
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.ExternalURL = "https://ci.example.com" }})
	var created api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners", map[string]any{
		"description": "golden runner", "tag_list": []string{"linux", "docker"}, "run_untagged": true}, &created)
	f := &fixture{inst: inst, runner: runnerclient.New(inst.URL, created.Token, "s_0123456789ab")}
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{
		"name": "web", "repo_url": "https://git.example.com/grp/web.git", "default_branch": "main"}, &f.project)
	for _, v := range []map[string]any{
		{"key": "DEPLOY_TOKEN", "value": "project-secret-1234", "masked": true},
		{"key": "KUBECONFIG", "value": "apiVersion: v1\n", "variable_type": "file"},
		{"key": "LEVEL", "value": "project"},
		{"key": "SHARED", "value": "project"},
		{"key": "MAIN_ONLY", "value": "protected", "protected": true},
	} {
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/variables", f.project.ID), v, nil)
	}
	return f
}

// create stores a pipeline as the YAML compiler's output would, through the service (the
// JSON form cannot say everything .gitlab-ci.yml can).
func (f *fixture) create(t *testing.T, d builds.PipelineDefinition) builds.Pipeline {
	t.Helper()
	p, err := f.inst.Service.CreatePipeline(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// take claims the next job as gitlab-runner does and checks that the runner's own types
// decode it without an unknown or mistyped field.
func (f *fixture) take(t *testing.T) *runnerclient.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	job, res, err := f.runner.RequestJob(ctx)
	if err != nil || job == nil {
		t.Fatalf("request job: %v (%+v)", err, res)
	}
	if _, err := runnerclient.DecodeJobStrict(job.Raw); err != nil {
		t.Fatalf("gitlab-runner's types do not take the payload: %v\n%s", err, job.Raw)
	}
	return job
}

func (f *fixture) succeed(t *testing.T, job *runnerclient.Job) {
	t.Helper()
	res, err := f.runner.UpdateJob(t.Context(), job, runnerclient.StateSuccess, runnerclient.UpdateOptions{})
	if err != nil || res.Code != http.StatusOK {
		t.Fatalf("finish job %d: %v (%+v)", job.ID, err, res)
	}
}

func TestJobPayloadGolden(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	script := []string{"make test"}

	t.Run("shell", func(t *testing.T) {
		// The JSON form over HTTP, for the implicit project 100: nothing to clone.
		f.inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects/100/pipeline", map[string]any{
			"ref": "main", "sha": sha, "stages": []string{"test"},
			"jobs": []map[string]any{{"name": "unit", "script": []string{"go vet ./...", "go test ./..."},
				"after_script": "echo done", "timeout": "10m"}}}, nil)
		golden(t, f.take(t), nil)
	})

	t.Run("docker", func(t *testing.T) {
		f.create(t, builds.PipelineDefinition{ProjectID: f.project.ID, Ref: "main", SHA: sha, Stages: []string{"test"},
			Jobs: []builds.JobDefinition{{
				Name: "rspec", Stage: "test", BeforeScript: []string{"bundle install"}, Script: []string{"bundle exec rspec"},
				AfterScript: []string{"rm -rf tmp"}, Tags: []string{"docker"},
				Image: builds.Image{Name: "ruby:3.3", Entrypoint: []string{""}, PullPolicy: []string{"if-not-present", "always"}},
				Services: []builds.Image{
					{Name: "postgres:16", Alias: "db", Command: []string{"postgres", "-c", "fsync=off"},
						Variables: []builds.Variable{{Key: "POSTGRES_PASSWORD", Value: "test"}}},
					{Name: "redis:7"},
				},
				Cache: []builds.Cache{
					{Key: "gems-$CI_COMMIT_REF_SLUG", Paths: []string{"vendor/ruby"}, Policy: "pull", FallbackKeys: []string{"gems-main"}},
					{Paths: []string{"node_modules/"}, Untracked: true, When: builds.WhenAlways, Unprotect: true},
				},
				Artifacts: []builds.Artifacts{
					{Name: "coverage", Paths: []string{"coverage/"}, Exclude: []string{"coverage/*.tmp"}, When: builds.WhenAlways, ExpireIn: "1 week"},
					{Paths: []string{"rspec.xml"}, ArtifactType: "junit", ArtifactFormat: "gzip", When: builds.WhenAlways},
				},
			}}})
		golden(t, f.take(t), nil)
	})

	t.Run("parallel", func(t *testing.T) {
		f.create(t, builds.PipelineDefinition{ProjectID: f.project.ID, Ref: "feature/login", SHA: sha, Stages: []string{"test"},
			Jobs: []builds.JobDefinition{{Name: "rspec 2/3", Stage: "test", Script: script, NodeIndex: 2, NodeTotal: 3}}})
		golden(t, f.take(t), nil)
	})

	t.Run("dependencies", func(t *testing.T) {
		f.create(t, builds.PipelineDefinition{ProjectID: f.project.ID, Ref: "main", SHA: sha, Stages: []string{"build", "test"},
			Jobs: []builds.JobDefinition{
				{Name: "compile", Stage: "build", Script: []string{"make"}, Artifacts: []builds.Artifacts{{Paths: []string{"bin/"}}}},
				{Name: "docs", Stage: "build", Script: []string{"make docs"}},
				{Name: "unit", Stage: "test", Script: script},
			}})
		ids := map[string]int64{}
		for range 2 {
			j := f.take(t)
			ids[j.JobInfo.Name] = j.ID
			f.succeed(t, j)
		}
		unit := f.take(t)
		if len(unit.Dependencies) != 1 || unit.Dependencies[0].ID != ids["compile"] {
			t.Errorf("dependencies %+v, want compile (%d) only: docs has no artifacts", unit.Dependencies, ids["compile"])
		}
		golden(t, unit, map[int64]string{ids["compile"]: "<compile-id>"})
	})

	t.Run("variables", func(t *testing.T) {
		// Over HTTP: job variables in the JSON form, pipeline variables in GitLab's list form.
		var p api.Pipeline
		f.inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", f.project.ID), map[string]any{
			"ref": "main", "sha": sha, "before_sha": beforeSHA, "source": "push", "stages": []string{"deploy"},
			"variables": []map[string]any{
				{"key": "SHARED", "value": "pipeline"},
				{"key": "RELEASE_NOTES", "value": "notes\n", "variable_type": "file"},
			},
			"jobs": []map[string]any{{"name": "deploy", "stage": "deploy", "script": "./deploy.sh", "variables": map[string]any{
				"LEVEL": "job", "JOB_ONLY": "job", "CI_DEBUG": "false",
				"SIGNING_KEY": map[string]any{"value": "job-secret-5678", "masked": true},
				"SETTINGS":    map[string]any{"value": "a: 1\n", "file": true},
			}}}}, &p)
		if p.Source != "push" || p.BeforeSha != beforeSHA || p.IID < 1 ||
			fmt.Sprint(p.Variables) != "[{SHARED env_var} {RELEASE_NOTES file}]" {
			t.Errorf("pipeline source %q, before_sha %q, iid %d, variables %v", p.Source, p.BeforeSha, p.IID, p.Variables)
		}
		golden(t, f.take(t), nil)
	})

}

// golden compares the job's JSON, normalised, with testdata/<test name>.json.
func golden(t *testing.T, job *runnerclient.Job, ids map[int64]string) {
	t.Helper()
	got := normalize(t, job, ids)
	path := filepath.Join("testdata", strings.ReplaceAll(strings.TrimPrefix(t.Name(), "TestJobPayloadGolden/"), "/", "_")+".json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the payload differs from %s (run with -update and read the diff):\n%s", path, lineDiff(want, got))
	}
}

var rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// normalize replaces what changes from run to run: the job token, ids the database
// assigns (the job's, its pipeline's, the runner's, and dependencies' as named in deps),
// times and the time in queue. The rest, iids and project ids included, is compared as sent.
func normalize(t *testing.T, job *runnerclient.Job, deps map[int64]string) []byte {
	t.Helper()
	s := strings.ReplaceAll(string(job.Raw), job.Token, "<job-token>")
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	// is names a value when it is the given id, and leaves it alone otherwise (a wrong id
	// then shows in the diff).
	is := func(id int64, name string) func(any) any {
		return func(v any) any {
			if fmt.Sprint(v) == fmt.Sprint(id) {
				return name
			}
			return v
		}
	}
	jobID, pipelineID := is(job.ID, "<job-id>"), is(job.JobInfo.PipelineID, "<pipeline-id>")
	doc["id"] = jobID(doc["id"])
	info := doc["job_info"].(map[string]any)
	info["id"], info["pipeline_id"] = jobID(info["id"]), pipelineID(info["pipeline_id"])
	info["time_in_queue_seconds"] = "<seconds>"
	for _, d := range doc["dependencies"].([]any) {
		d := d.(map[string]any)
		for id, name := range deps {
			d["id"] = is(id, name)(d["id"])
		}
	}
	lastPart := func(url string, f func(any) any) string {
		i := strings.LastIndexByte(url, '/')
		return fmt.Sprint(url[:i+1], f(url[i+1:]))
	}
	for _, v := range doc["variables"].([]any) {
		v := v.(map[string]any)
		value := v["value"].(string)
		switch key := v["key"].(string); {
		case key == "CI_JOB_ID":
			v["value"] = jobID(value)
		case key == "CI_PIPELINE_ID":
			v["value"] = pipelineID(value)
		case key == "CI_JOB_URL":
			v["value"] = lastPart(value, jobID)
		case key == "CI_PIPELINE_URL":
			v["value"] = lastPart(value, pipelineID)
		case key == "CI_RUNNER_ID":
			v["value"] = "<runner-id>"
		case rfc3339.MatchString(value):
			v["value"] = "<time>"
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// lineDiff shows how got differs from want line by line (- want, + got), from a longest
// common subsequence of their lines; the files are small.
func lineDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	// lcs[i][j]: length of the longest common subsequence of w[i:] and g[j:].
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			i, j = i+1, j+1
		case j < len(g) && (i == len(w) || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&b, "+%5d %s\n", j+1, g[j])
			j++
		default:
			fmt.Fprintf(&b, "-%5d %s\n", i+1, w[i])
			i++
		}
	}
	return b.String()
}
