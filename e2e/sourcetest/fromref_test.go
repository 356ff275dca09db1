package sourcetest_test

import (
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// fromRefCI is the repository's .gitlab-ci.yml: which jobs a pipeline has tells the ref, the
// source and the variables its rules saw, and lint comes from an include: local at the same
// commit.
const fromRefCI = `
include: ci/lint.yml
stages: [build, test, deploy]
build:
  stage: build
  script: make
  rules:
    - if: $CI_COMMIT_TAG
      when: never
    - when: on_success
api_only:
  stage: test
  script: echo api
  rules:
    - if: $CI_PIPELINE_SOURCE == "api"
deploy:
  stage: deploy
  script: ./deploy
  rules:
    - if: $DEPLOY == "yes"
release:
  stage: deploy
  script: ./release $CI_COMMIT_TAG
  rules:
    - if: $CI_COMMIT_TAG
`

func jobNames(p api.Pipeline) []string {
	var names []string
	for _, j := range p.Jobs {
		names = append(names, j.Name)
	}
	slices.Sort(names)
	return names
}

// TestPipelineFromRef: POST …/pipeline with only a ref reads .gitlab-ci.yml from the
// project's repository at the ref's head commit (GitLab's API), for branches and tags, with
// GitLab's variables in the JSON body or the query; the posted-YAML form is unchanged.
func TestPipelineFromRef(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	first := m.Commit(map[string]string{".gitlab-ci.yml": fromRefCI, "ci/lint.yml": "lint:\n  stage: test\n  script: lint\n"})
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare}, &project)
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	create := func(t *testing.T, query string, body any) api.Pipeline {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusCreated, "POST", path+query, body, &p)
		return p
	}

	p := create(t, "", map[string]any{"ref": "main"})
	if p.Ref != "main" || p.Sha != first || p.Source != "api" || p.GitStrategy != "fetch" {
		t.Errorf("pipeline ref %q sha %q source %q git_strategy %q; want main at %s, api, fetch", p.Ref, p.Sha, p.Source, p.GitStrategy, first)
	}
	if got, want := jobNames(p), []string{"api_only", "build", "lint"}; !slices.Equal(got, want) {
		t.Errorf("jobs %v, want %v", got, want)
	}

	// A new commit: the next pipeline is at the new head, with the file as it is there.
	second := m.Commit(map[string]string{"ci/lint.yml": "lint:\n  stage: test\n  script: lint\nvet:\n  stage: test\n  script: vet\n"})
	p = create(t, "?ref=main", nil) // GitLab's documented call: the ref in the query, no body
	if p.Sha != second {
		t.Errorf("sha %s, want the new head %s", p.Sha, second)
	}
	if got, want := jobNames(p), []string{"api_only", "build", "lint", "vet"}; !slices.Equal(got, want) {
		t.Errorf("jobs at the new head %v, want %v", got, want)
	}

	// Pipeline variables, GitLab's list in JSON or in the query, reach rules; so does
	// jobapi's source (web: api_only's rule is false).
	deployVar := []map[string]string{{"key": "DEPLOY", "value": "yes"}}
	for _, c := range []struct {
		name, query string
		body        any
		want        []string
	}{
		{"json", "", map[string]any{"ref": "main", "source": "web", "variables": deployVar}, []string{"build", "deploy", "lint", "vet"}},
		{"query", "?ref=main&variables[][key]=DEPLOY&variables[][value]=yes&variables[][variable_type]=env_var", "",
			[]string{"api_only", "build", "deploy", "lint", "vet"}},
		{"query ref, json variables", "?ref=main", map[string]any{"source": "web", "variables": deployVar}, []string{"build", "deploy", "lint", "vet"}},
	} {
		p := create(t, c.query, c.body)
		if got := jobNames(p); !slices.Equal(got, c.want) {
			t.Errorf("%s: jobs %v, want %v", c.name, got, c.want)
		}
		if len(p.Variables) != 1 || p.Variables[0].Key != "DEPLOY" {
			t.Errorf("%s: pipeline variables %+v, want DEPLOY", c.name, p.Variables)
		}
	}

	// A tag: a tag pipeline at the tag's commit (annotated: peeled), CI_COMMIT_TAG set.
	git(t, m.Work, "tag", "-a", "-m", "release", "v1.0", first)
	git(t, m.Work, "push", "--quiet", m.Bare, "v1.0")
	p = create(t, "", map[string]any{"ref": "v1.0"})
	if p.Sha != first || p.Ref != "refs/tags/v1.0" {
		t.Errorf("tag pipeline ref %q sha %s, want refs/tags/v1.0 at %s", p.Ref, p.Sha, first)
	}
	if got, want := jobNames(p), []string{"api_only", "lint", "release"}; !slices.Equal(got, want) {
		t.Errorf("tag pipeline jobs %v, want %v", got, want)
	}
	// The earlier pipelines go, so that the runner's next job is the tag pipeline's.
	for id := p.ID - 1; id > 0; id-- {
		inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/cancel", project.ID, id), nil, nil)
	}
	job := inst.NewRunner(t).TakeNamed(t, "lint")
	for k, want := range map[string]string{"CI_COMMIT_TAG": "v1.0", "CI_COMMIT_SHA": first, "CI_COMMIT_REF_NAME": "v1.0"} {
		if got, _ := job.Variable(k); got != want {
			t.Errorf("tag pipeline's job: %s = %q, want %q", k, got, want)
		}
	}

	// The posted-YAML form stays as it was: the body is the configuration.
	var posted api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", path, map[string]any{"ref": "main", "ci_config": "only_posted: {script: x}\n"}, &posted)
	if got := jobNames(posted); !slices.Equal(got, []string{"only_posted"}) {
		t.Errorf("posted ci_config: jobs %v", got)
	}
}

// TestPipelineFromRefRefused: what cannot be read or compiled is a 400 that names it, and
// nothing is written.
func TestPipelineFromRefRefused(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	m.Commit(map[string]string{".gitlab-ci.yml": "build: {script: make}\n"})
	git(t, m.Work, "checkout", "--quiet", "-b", "nofile")
	git(t, m.Work, "rm", "--quiet", ".gitlab-ci.yml")
	m.Commit(map[string]string{"README": "no CI here\n"})
	git(t, m.Work, "checkout", "--quiet", "-b", "broken")
	m.Commit(map[string]string{".gitlab-ci.yml": "build: {script: [make], stage: nowhere}\n"})
	git(t, m.Work, "checkout", "--quiet", "-b", "filtered")
	m.Commit(map[string]string{".gitlab-ci.yml": "workflow: {rules: [{if: $CI_PIPELINE_SOURCE == \"push\"}]}\nbuild: {script: make}\n"})
	git(t, m.Work, "push", "--quiet", m.Bare, "main", "nofile", "broken", "filtered")
	git(t, m.Work, "tag", "main") // a tag named as the branch
	git(t, m.Work, "push", "--quiet", m.Bare, "refs/tags/main")

	inst := jobapitest.Start(t, jobapitest.Options{})
	project := func(repo string) int64 {
		var p api.Project
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": fmt.Sprintf("p%d", len(repo)), "repo_url": repo}, &p)
		return p.ID
	}
	app := project("file://" + m.Bare)
	gone := project("file://" + m.Bare + "-gone")
	bare := project("")
	count := func() int { return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines") }
	before := count()
	for _, c := range []struct {
		name    string
		project int64
		body    any
		want    string
	}{
		{"unknown ref", app, map[string]any{"ref": "nope"}, `ref "nope" is neither a branch nor a tag`},
		{"ambiguous ref", app, map[string]any{"ref": "main"}, `ref "main" is ambiguous`},
		{"missing file", app, map[string]any{"ref": "refs/heads/nofile"}, "Missing CI config file: .gitlab-ci.yml"},
		{"invalid file", app, map[string]any{"ref": "broken"}, "nowhere"},
		{"filtered out", app, map[string]any{"ref": "filtered"}, "Pipeline filtered out by workflow rules."},
		{"ref git reads as an option", app, map[string]any{"ref": "--upload-pack=touch /tmp/x"}, "not a valid git ref name"},
		{"unreachable remote", gone, map[string]any{"ref": "main"}, "could not be read"},
		{"no repository", bare, map[string]any{"ref": "main"}, "has no repository"},
		{"implicit project", 424242, map[string]any{"ref": "main"}, "has no repository"},
		{"bad variable", app, map[string]any{"ref": "refs/heads/main", "variables": []map[string]string{{"key": "A-B", "value": "x"}}}, "variable name"},
		{"bad variable type", app, map[string]any{"ref": "refs/heads/main", "variables": []map[string]string{{"key": "A", "value": "x", "variable_type": "blob"}}}, "variable_type"},
	} {
		resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", c.project), c.body)
		msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q does not say %q", c.name, msg, c.want)
		}
	}
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=refs/heads/main&variables[][value]=x", app), "")
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "variables[][key]") {
		t.Errorf("query variable without a key: %q", msg)
	}
	if after := count(); after != before {
		t.Errorf("refused requests wrote %d pipelines", after-before)
	}
	// The same project and ref, spelled unambiguously, work.
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", app), map[string]any{"ref": "refs/heads/main"}, &p)
	if p.Ref != "main" || len(p.Jobs) != 1 {
		t.Errorf("refs/heads/main: ref %q jobs %+v", p.Ref, p.Jobs)
	}
}

// TestPipelineFromRefCIConfigPath: a project's ci_config_path (GitLab's project attribute)
// names the file a pipeline from a ref reads; only paths in the project's own repository
// are taken.
func TestPipelineFromRefCIConfigPath(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	sha := m.Commit(map[string]string{"ci/pipeline.yml": "custom: {script: make}\n", ".gitlab-ci.yml": "default_file: {script: make}\n"})
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects",
		map[string]any{"name": "app", "repo_url": "file://" + m.Bare, "ci_config_path": "ci/pipeline.yml"}, &project)
	if project.CIConfigPath != "ci/pipeline.yml" {
		t.Errorf("created project's ci_config_path %q", project.CIConfigPath)
	}
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", path, map[string]any{"ref": "main"}, &p)
	if got := jobNames(p); !slices.Equal(got, []string{"custom"}) || p.Sha != sha {
		t.Errorf("jobs %v at %s, want custom (ci/pipeline.yml) at %s", got, p.Sha, sha)
	}

	projectPath := fmt.Sprintf("/api/v4/projects/%d", project.ID)
	inst.MustDo(t, http.StatusOK, "PUT", projectPath, map[string]any{"ci_config_path": "ci/missing.yml"}, &project)
	resp, b := inst.Do(t, "POST", path, map[string]any{"ref": "main"})
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "Missing CI config file: ci/missing.yml") {
		t.Errorf("missing ci_config_path file: %q", msg)
	}
	for _, bad := range []string{".gitlab-ci.yml@group/other", "https://example.com/ci.yml", "../x.yml", "-x"} {
		resp, b := inst.Do(t, "PUT", projectPath, map[string]any{"ci_config_path": bad})
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "ci_config_path") {
			t.Errorf("ci_config_path %q: %q", bad, msg)
		}
	}
	// Back to the default, in GitLab's form encoding.
	resp, b = inst.Do(t, "PUT", projectPath, "ci_config_path=", "Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	inst.MustDo(t, http.StatusCreated, "POST", path, map[string]any{"ref": "main"}, &p)
	if got := jobNames(p); !slices.Equal(got, []string{"default_file"}) {
		t.Errorf("jobs %v, want default_file (.gitlab-ci.yml)", got)
	}
}

// TestPythonGitlabPipelines: Debian's python-gitlab drives pipelines as a team's script
// would (testdata/pipelines.py): create from a ref of a real repository, list with filters
// and pages, variables, cancel, retry, latest, delete.
func TestPythonGitlabPipelines(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	m := newMonorepo(t)
	head := m.Commit(map[string]string{".gitlab-ci.yml": `
stages: [build, deploy]
build:
  stage: build
  script: make
deploy:
  stage: deploy
  script: ./deploy
  rules:
    - if: $DEPLOY == "yes"
`})
	git(t, m.Work, "tag", "v1.0")
	git(t, m.Work, "push", "--quiet", m.Bare, "v1.0")
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare}, &project)
	out, err := exec.Command(python, "testdata/pipelines.py", inst.URL, jobapitest.AdminToken, fmt.Sprint(project.ID), head).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}
