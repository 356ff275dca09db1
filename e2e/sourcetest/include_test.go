package sourcetest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// includeRepo makes a bare repository whose main holds CI files that include each other.
func includeRepo(t *testing.T) (bare, sha string) {
	t.Helper()
	m := newMonorepo(t)
	files := map[string]string{
		"ci/build.yml":         "include: ci/common.yml\nbuild:\n  stage: build\n  extends: .common\n  script: make\n",
		"ci/common.yml":        ".common:\n  image: golang:1.22\nvariables:\n  FROM_COMMON: \"yes\"\n",
		"ci/test.yml":          "test:\n  stage: test\n  script: go test ./...\n",
		"ci/checks/vet.yml":    "vet:\n  stage: test\n  script: go vet ./...\n",
		"ci/checks/format.yml": "format:\n  stage: test\n  script: gofmt -l .\n",
	}
	return m.Bare, m.Commit(files)
}

// TestIncludeLocal: include: local is read from the project's repository at the
// pipeline's commit (or its ref), nested includes and extends across files work, and what
// cannot be included is a 400 naming it.
func TestIncludeLocal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	bare, sha := includeRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + bare}, &project)
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	const ci = `
include:
  - local: ci/build.yml
  - /ci/test.yml
  - local: ci/checks/*.yml
stages: [build, test]
`
	for _, q := range []string{"?ref=main&sha=" + sha, "?ref=main"} {
		resp, b := inst.Do(t, "POST", path+q, ci, "Content-Type", "application/yaml")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", q, resp.StatusCode, b)
		}
		var p api.Pipeline
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, j := range p.Jobs {
			names = append(names, j.Name)
		}
		if want := []string{"build", "test", "format", "vet"}; !slices.Equal(names, want) {
			t.Errorf("%s: jobs %v, want %v", q, names, want)
		}
	}
	r := inst.NewRunner(t)
	build := r.TakeNamed(t, "build")
	if build.Image.Name != "golang:1.22" {
		t.Errorf("build image %q, want golang:1.22 (extends .common of a nested include)", build.Image.Name)
	}
	if v, _ := build.Variable("FROM_COMMON"); v != "yes" {
		t.Errorf("FROM_COMMON = %q, want yes (a global variable of a nested include)", v)
	}

	for yaml, want := range map[string]string{
		"include: ci/missing.yml\njob: {script: x}\n":                         "include:local Local file `ci/missing.yml` does not exist!",
		"include: {remote: 'https://127.0.0.1:1/ci.yml'}\njob: {script: x}\n": "local or private network",
		"include: {template: Go.gitlab-ci.yml}\njob: {script: x}\n":           "include:template is not supported by jobapi yet",
	} {
		resp, b := inst.Do(t, "POST", path+"?ref=main&sha="+sha, yaml, "Content-Type", "application/yaml")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), want) {
			t.Errorf("%q: %d %s; want 400 with %q", yaml, resp.StatusCode, b, want)
		}
	}

	// A project without a repository: include: local is a 400 that says so.
	var bareProject api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "norepo"}, &bareProject)
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=main", bareProject.ID), ci, "Content-Type", "application/yaml")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "no repository") {
		t.Errorf("include without a repository: %d %s", resp.StatusCode, b)
	}
}
