package sourcetest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestPipelineLatestFollowsHead: GET …/pipelines/latest is GitLab's "latest pipeline for
// the most recent commit on the ref": once the branch moves on, the pipeline of its old
// head is not the latest (403, GitLab's answer), and a newer pipeline of the ref at another
// commit is not either. Before, jobapi answered the ref's newest pipeline whatever its
// commit.
func TestPipelineLatestFollowsHead(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	first := m.Commit(map[string]string{".gitlab-ci.yml": "build: {script: make}\n"})
	git(t, m.Work, "push", "--quiet", m.Bare, "main:feature")
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare}, &project)
	gone := func() int64 {
		var p api.Project
		inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "gone", "repo_url": "file://" + m.Bare + "-gone"}, &p)
		return p.ID
	}()
	create := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	latest := func(query string) (int, api.Pipeline, string) {
		t.Helper()
		resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/latest%s", project.ID, query), nil)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, api.Pipeline{}, jobapitest.WantJSONError(t, resp, b, resp.StatusCode)
		}
		return resp.StatusCode, decode[api.Pipeline](t, b), ""
	}

	var atFirst api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", create, map[string]any{"ref": "main"}, &atFirst)
	if code, p, _ := latest(""); code != http.StatusOK || p.ID != atFirst.ID || p.Sha != first {
		t.Errorf("latest of the default branch: %d, pipeline %d at %s; want %d at %s", code, p.ID, p.Sha, atFirst.ID, first)
	}
	// A newer pipeline of main at a commit that is not its head (posted, with a sha) is not
	// the latest: GitLab looks at the head commit only.
	var elsewhere api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", create, map[string]any{"ref": "main", "sha": strings.Repeat("ab", 20),
		"ci_config": "build: {script: make}\n"}, &elsewhere)
	if code, p, _ := latest("?ref=main"); code != http.StatusOK || p.ID != atFirst.ID {
		t.Errorf("latest of main with a newer pipeline at another commit: %d, pipeline %d; want %d", code, p.ID, atFirst.ID)
	}

	// The branch moves on: its old pipeline is not the latest of its newest commit.
	second := m.Commit(map[string]string{"README": "more\n"})
	code, _, msg := latest("?ref=main")
	if code != http.StatusForbidden || !strings.Contains(msg, second) {
		t.Errorf("latest after the head moved to %s: %d %q, want 403 naming the commit", second, code, msg)
	}
	var atSecond api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", create, map[string]any{"ref": "main"}, &atSecond)
	if code, p, _ := latest("?ref=main"); code != http.StatusOK || p.ID != atSecond.ID || p.Sha != second {
		t.Errorf("latest at the new head: %d, pipeline %d at %s; want %d at %s", code, p.ID, p.Sha, atSecond.ID, second)
	}
	// Another branch at the first commit has no pipeline of its own.
	if code, _, _ := latest("?ref=feature"); code != http.StatusForbidden {
		t.Errorf("latest of a branch without pipelines: %d, want 403", code)
	}

	for _, c := range []struct {
		name, path, want string
	}{
		{"unknown ref", fmt.Sprintf("/api/v4/projects/%d/pipelines/latest?ref=nope", project.ID), `"nope"`},
		{"ref git reads as an option", fmt.Sprintf("/api/v4/projects/%d/pipelines/latest?ref=--upload-pack=x", project.ID), "ref"},
		{"unreachable remote", fmt.Sprintf("/api/v4/projects/%d/pipelines/latest", gone), "could not be read"},
	} {
		resp, b := inst.Do(t, "GET", c.path, nil)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want it to say %s", c.name, msg, c.want)
		}
	}
}
