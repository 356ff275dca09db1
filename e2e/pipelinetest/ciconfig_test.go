package pipelinetest_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// pipelineYAML exercises what the HTTP layer adds to the compiler: the ref of the request,
// the project's variables and default branch reach rules, and both body forms work.
const pipelineYAML = `
stages: [build, test, deploy]
variables:
  GLOBAL: g
  LITERAL:
    value: $NOT_EXPANDED
    expand: false
.base:
  image: golang:1.22
  before_script: [echo base]
build:
  extends: .base
  stage: build
  script: make
test:
  stage: test
  needs: [build]
  script: [go test ./...]
  parallel: 2
deploy:
  stage: deploy
  script: ./deploy
  rules:
    - if: $DEPLOY_ENABLED == "yes" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH
      when: manual
docs:
  stage: deploy
  script: ./docs
  rules:
    - if: $CI_COMMIT_TAG
`

func jobNames(p api.Pipeline) []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.Name)
	}
	slices.Sort(out)
	return out
}

// TestPipelineFromYAML: POST …/pipeline with the .gitlab-ci.yml text (as application/yaml,
// and as {"ci_config": …}) creates the jobs GitLab would for that ref, with rules seeing the
// project's variables and default branch.
func TestPipelineFromYAML(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "default_branch": "trunk"}, &proj)
	inst.MustDo(t, http.StatusCreated, "POST", jobapitest.ProjectPath(proj.ID)+"/variables", map[string]any{"key": "DEPLOY_ENABLED", "value": "yes"}, nil)

	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline?ref=trunk", pipelineYAML, "Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p := jobapitest.Decode[api.Pipeline](t, b)
	if got, want := jobNames(p), []string{"build", "deploy", "test 1/2", "test 2/2"}; !slices.Equal(got, want) {
		t.Errorf("jobs on the default branch: %v, want %v", got, want)
	}
	if p.Ref != "trunk" || !slices.Equal(p.Stages, []string{".pre", "build", "test", "deploy", ".post"}) && !slices.Equal(p.Stages, []string{"build", "test", "deploy"}) {
		t.Errorf("pipeline ref %q stages %v", p.Ref, p.Stages)
	}

	resp, b = inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "refs/tags/v1.0", "ci_config": pipelineYAML})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p = jobapitest.Decode[api.Pipeline](t, b)
	if got, want := jobNames(p), []string{"build", "docs", "test 1/2", "test 2/2"}; !slices.Equal(got, want) {
		t.Errorf("jobs on a tag: %v, want %v", got, want)
	}

	// A pipeline variable wins over the project's in rules, as in the job.
	resp, b = inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline", map[string]any{"ref": "trunk", "ci_config": pipelineYAML,
		"variables": []map[string]string{{"key": "DEPLOY_ENABLED", "value": "no"}}})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if got, want := jobNames(jobapitest.Decode[api.Pipeline](t, b)), []string{"build", "test 1/2", "test 2/2"}; !slices.Equal(got, want) {
		t.Errorf("jobs with DEPLOY_ENABLED=no as a pipeline variable: %v, want %v", got, want)
	}

	// The runner gets the compiled job: image from the hidden parent, the global variable.
	r := inst.NewRunner(t)
	job := r.TakeNamed(t, "build")
	if job.Image.Name != "golang:1.22" {
		t.Errorf("build's image %q, want golang:1.22 (from extends: .base)", job.Image.Name)
	}
	if v, ok := job.Variable("GLOBAL"); !ok || v != "g" {
		t.Errorf("build's GLOBAL = %q (%v), want the global variable g", v, ok)
	}
	literal := slices.IndexFunc(job.Variables, func(v runnerclient.Variable) bool { return v.Key == "LITERAL" })
	if literal < 0 || !job.Variables[literal].Raw || job.Variables[literal].Value != "$NOT_EXPANDED" {
		t.Errorf("LITERAL (expand: false) did not reach the runner raw as $NOT_EXPANDED: %+v", job.Variables)
	}
}

// TestPipelineFromYAMLBadInput: configuration errors are 400s that name what is wrong (with
// the line where there is one), and nothing is written.
func TestPipelineFromYAMLBadInput(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	path := jobapitest.ProjectPath(7) + "/pipeline"
	cases := []struct {
		name, body, contentType string
		want                    []string
	}{
		{"syntax error", "build:\n  script: [make\n  stage: build\n", "application/yaml", []string{"line"}},
		{"unknown key", "build:\n  script: make\n  frobnicate: true\n", "application/yaml", []string{"frobnicate", "build"}},
		{"cycle", "a:\n  script: x\n  needs: [b]\nb:\n  script: y\n  needs: [a]\n", "application/yaml", []string{"a"}},
		{"filtered out", "workflow:\n  rules:\n    - if: $CI_COMMIT_TAG\nbuild:\n  script: make\n", "application/yaml", []string{"filtered out"}},
		{"empty body", "", "application/yaml", []string{"empty"}},
		{"ci_config and jobs", `{"ci_config": "a:\n  script: x\n", "jobs": [{"name": "b", "script": "y"}]}`, "application/json", []string{"either"}},
	}
	for _, c := range cases {
		resp, b := inst.Do(t, "POST", path, c.body, "Content-Type", c.contentType)
		msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q does not mention %q", c.name, msg, w)
			}
		}
	}
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines"); n != 0 {
		t.Errorf("%d pipelines written by refused requests", n)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM builds"); n != 0 {
		t.Errorf("%d builds written by refused requests", n)
	}
}

// TestCILint: GitLab's lint answers valid/errors/warnings/merged_yaml/jobs for a valid and an
// invalid configuration, as JSON {"content"} and as a YAML body, and creates nothing.
func TestCILint(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	path := jobapitest.ProjectPath(3) + "/ci/lint"
	type lint struct {
		Valid      bool     `json:"valid"`
		Errors     []string `json:"errors"`
		Warnings   []string `json:"warnings"`
		MergedYAML string   `json:"merged_yaml"`
		Jobs       []struct {
			Name   string   `json:"name"`
			Stage  string   `json:"stage"`
			Script []string `json:"script"`
			When   string   `json:"when"`
		} `json:"jobs"`
	}
	var ok lint
	inst.MustDo(t, http.StatusOK, "POST", path, map[string]any{"content": pipelineYAML, "dry_run": true}, &ok)
	if !ok.Valid || len(ok.Errors) != 0 || ok.MergedYAML == "" || len(ok.Jobs) != 3 { // build and two copies of test: no DEPLOY_ENABLED, no tag
		t.Errorf("valid config linted (dry run) as %+v", ok)
	}
	var static lint
	inst.MustDo(t, http.StatusOK, "POST", path, map[string]any{"content": pipelineYAML}, &static)
	if !static.Valid || len(static.Jobs) != 5 { // the static check lists deploy and docs too
		t.Errorf("valid config linted (static) as %+v", static)
	}
	if !strings.Contains(ok.MergedYAML, "golang:1.22") {
		t.Errorf("merged_yaml does not show the extended image: %s", ok.MergedYAML)
	}

	resp, b := inst.Do(t, "POST", path, "build:\n  script: make\n  stage: nowhere\n", "Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	bad := jobapitest.Decode[lint](t, b)
	if bad.Valid || len(bad.Errors) == 0 || !strings.Contains(strings.Join(bad.Errors, " "), "nowhere") {
		t.Errorf("a job in an unknown stage linted as %+v", bad)
	}

	resp, b = inst.Do(t, "POST", path, map[string]any{"ref": "main"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	if n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines"); n != 0 {
		t.Errorf("lint wrote %d pipelines", n)
	}
}

// TestCILintStaticCheck: without dry_run, lint is GitLab's static check: it validates the
// file and lists its jobs without evaluating rules, only or except for a ref, so a file
// whose jobs all run only on master, or only in merge request pipelines, is valid. With
// dry_run (and ref) it simulates the pipeline's creation, and those files make none.
func TestCILintStaticCheck(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	path := jobapitest.ProjectPath(3) + "/ci/lint"
	type lint struct {
		Valid    bool              `json:"valid"`
		Errors   []string          `json:"errors"`
		Includes []json.RawMessage `json:"includes"`
		Jobs     []struct {
			Name string `json:"name"`
			When string `json:"when"`
		} `json:"jobs"`
	}
	for _, tc := range []struct{ name, src string }{
		{"only master", "build:\n  script: make\n  only: [master]\ntest:\n  script: make test\n  only: [master]\n"},
		{"merge requests only", "build:\n  script: make\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"merge_request_event\"\ntest:\n  script: make test\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"merge_request_event\"\n      when: manual\n"},
		{"workflow filters every push", "workflow:\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"schedule\"\nbuild:\n  script: make\ntest:\n  script: make test\n"},
	} {
		var static lint
		inst.MustDo(t, http.StatusOK, "POST", path, map[string]any{"content": tc.src, "ref": "main"}, &static)
		if !static.Valid || len(static.Errors) != 0 || len(static.Jobs) != 2 || static.Jobs[0].Name != "build" ||
			static.Jobs[1].Name != "test" || static.Includes == nil {
			t.Errorf("%s: static check %+v, want valid with build and test listed, includes []", tc.name, static)
		}
		// The same in the query, with a YAML body.
		resp, b := inst.Do(t, "POST", path+"?include_jobs=true", tc.src, "Content-Type", "application/yaml")
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		if got := jobapitest.Decode[lint](t, b); !got.Valid || len(got.Jobs) != 2 {
			t.Errorf("%s: static check of a YAML body %s", tc.name, b)
		}

		var dry lint
		inst.MustDo(t, http.StatusOK, "POST", path, map[string]any{"content": tc.src, "dry_run": true, "ref": "main"}, &dry)
		if dry.Valid || len(dry.Errors) != 1 || len(dry.Jobs) != 0 {
			t.Errorf("%s: dry run for main %+v, want invalid: no pipeline", tc.name, dry)
		}
		resp, b = inst.Do(t, "POST", path+"?dry_run=true&ref=main", tc.src, "Content-Type", "application/yaml")
		jobapitest.WantStatus(t, resp, b, http.StatusOK)
		if got := jobapitest.Decode[lint](t, b); got.Valid {
			t.Errorf("%s: dry run of a YAML body for main %s, want invalid", tc.name, b)
		}
	}
	// A dry run for master makes the only: [master] pipeline.
	var master lint
	inst.MustDo(t, http.StatusOK, "POST", path, map[string]any{"content": "build:\n  script: make\n  only: [master]\n", "dry_run": true, "ref": "master"}, &master)
	if !master.Valid || len(master.Jobs) != 1 {
		t.Errorf("dry run for master: %+v", master)
	}
	// What is wrong with the file is wrong in both.
	var bad lint
	inst.MustDo(t, http.StatusOK, "POST", path, map[string]any{"content": "build:\n  script: make\n  only: [master]\n  stage: nowhere\n"}, &bad)
	if bad.Valid || len(bad.Errors) != 1 || !strings.Contains(bad.Errors[0], "nowhere") || len(bad.Jobs) != 0 {
		t.Errorf("static check of a bad stage: %+v", bad)
	}
	resp, b := inst.Do(t, "POST", path+"?dry_run=maybe", map[string]any{"content": "build: {script: make}\n"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
	if !strings.Contains(string(b), "dry_run") {
		t.Errorf("a bad dry_run: %s", b)
	}
}
