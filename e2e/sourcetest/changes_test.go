package sourcetest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

const monorepoCI = `
stages: [build, test]
api:build:
  stage: build
  script: make -C services/api
  rules:
    - changes: [services/api/**/*, go.mod]
api:test:
  stage: test
  script: make -C services/api test
  only:
    changes: [services/api/**/*]
web:build:
  stage: build
  script: npm --prefix services/web run build
  rules:
    - changes:
        paths: [services/web/**/*]
web:test:
  stage: test
  script: npm --prefix services/web test
  needs: [web:build]
  rules:
    - changes: [services/web/**/*]
docker:
  stage: build
  script: docker build .
  rules:
    - exists: [Dockerfile]
helm:
  stage: build
  script: helm lint chart
  rules:
    - exists: [chart/Chart.yaml]
`

// TestPushPipelineRunsTheChangedServicesJobs: a push pipeline's before_sha..sha, read with
// git from the project's repository, decides which jobs rules:changes and only:changes
// create; a new branch (no before_sha) and an API pipeline create them all, as GitLab;
// compare_to resolves a branch of the repository; a before_sha the repository does not
// have is a 400 that names it.
func TestPushPipelineRunsTheChangedServicesJobs(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	c1 := m.Commit(map[string]string{"services/api/main.go": "package main\n", "services/web/package.json": "{}\n",
		"Dockerfile": "FROM scratch\n", "go.mod": "module app\n"})
	c2 := m.Commit(map[string]string{"services/web/src/app.ts": "export {}\n"})
	git(t, m.Work, "checkout", "--quiet", "-b", "feature")
	f1 := m.Commit(map[string]string{"services/api/handler.go": "package main\n"})

	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "mono", "repo_url": "file://" + m.Bare}, &project)
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	create := func(query, ci string) (int, api.Pipeline, string) {
		t.Helper()
		resp, b := inst.Do(t, "POST", path+query, ci, "Content-Type", "application/yaml")
		var p api.Pipeline
		if resp.StatusCode == http.StatusCreated {
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, p, string(b)
	}
	jobNames := func(p api.Pipeline) []string {
		var out []string
		for _, j := range p.Jobs {
			out = append(out, j.Name)
		}
		slices.Sort(out)
		return out
	}

	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"push changing web", "?source=push&ref=main&sha=" + c2 + "&before_sha=" + c1, []string{"docker", "web:build", "web:test"}},
		{"push of a new branch", "?source=push&ref=feature&sha=" + f1 + "&before_sha=" + strings.Repeat("0", 40),
			[]string{"api:build", "api:test", "docker", "web:build", "web:test"}},
		{"push changing api", "?source=push&ref=feature&sha=" + f1 + "&before_sha=" + c2, []string{"api:build", "api:test", "docker"}},
		{"api pipeline", "?ref=main&sha=" + c2, []string{"api:build", "api:test", "docker", "web:build", "web:test"}},
	} {
		code, p, body := create(tc.query, monorepoCI)
		if code != http.StatusCreated {
			t.Fatalf("%s: %d %s", tc.name, code, body)
		}
		if got := jobNames(p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: jobs %v, want %v", tc.name, got, tc.want)
		}
	}

	// The web job of the first push runs for real: the pipeline is a normal one.
	r := inst.NewRunner(t)
	if j := r.TakeNamed(t, "web:build"); j.GitInfo.BeforeSha != c1 {
		t.Errorf("web:build before_sha %s, want %s", j.GitInfo.BeforeSha, c1)
	}

	// compare_to: the feature branch against main, whatever the pipeline's source.
	compare := `
api:
  script: make api
  rules:
    - changes: {paths: [services/api/**/*], compare_to: refs/heads/main}
web:
  script: make web
  rules:
    - changes: {paths: [services/web/**/*], compare_to: main}
`
	code, p, body := create("?ref=feature&sha="+f1, compare)
	if code != http.StatusCreated || !slices.Equal(jobNames(p), []string{"api"}) {
		t.Errorf("compare_to main: %d %v %s", code, jobNames(p), body)
	}

	for _, tc := range []struct{ name, query, ci, want string }{
		{"unknown before_sha", "?source=push&ref=main&sha=" + c2 + "&before_sha=" + strings.Repeat("1", 40), monorepoCI,
			"before_sha " + strings.Repeat("1", 40) + " is not a commit of the project's repository"},
		{"unknown compare_to", "?ref=feature&sha=" + f1, "a: {script: x, rules: [{changes: {paths: [x], compare_to: nope}}]}\n",
			`compare_to is not a valid ref: \"nope\"`},
		{"exists:project", "?ref=main&sha=" + c2, "a: {script: x, rules: [{exists: {paths: [x], project: g/p}}]}\n",
			"rules:rule:exists:project is not supported by jobapi yet"},
	} {
		code, _, body := create(tc.query, tc.ci)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s; want 400 with %s", tc.name, code, body, tc.want)
		}
	}

	// A project whose repository cannot be fetched: a 400 that says so, never "changed".
	var gone api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "gone", "repo_url": "file://" + m.Bare + "-missing"}, &gone)
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?source=push&ref=main&sha=%s&before_sha=%s", gone.ID, c2, c1),
		monorepoCI, "Content-Type", "application/yaml")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "could not be fetched") {
		t.Errorf("unreachable repository: %d %s", resp.StatusCode, b)
	}
}
