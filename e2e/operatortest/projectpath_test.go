package operatortest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestProjectNamedByPath: GitLab's API takes a project's URL-encoded path wherever it takes
// its id. A project's row is found by its path, a project that has pipelines but no row by
// project-<id> (CI_PROJECT_PATH names it so), and a path no project has answers as an
// unknown id does: 404 with a token, 401 without one.
func TestProjectNamedByPath(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var app api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app"}, &app)
	inst.CreatePipeline(t, app.ID, []string{"test"}, jobapitest.Job{"name": "unit", "stage": "test", "script": "x"})
	const implicit = 424243
	inst.CreatePipeline(t, implicit, []string{"test"}, jobapitest.Job{"name": "lint", "stage": "test", "script": "x"})

	for _, c := range []struct {
		path string
		id   int64
	}{{"jobapi%2F" + app.Path, app.ID}, {fmt.Sprintf("jobapi%%2Fproject-%d", implicit), implicit}} {
		var pipes []api.Pipeline
		inst.MustDo(t, http.StatusOK, "GET", "/api/v4/projects/"+c.path+"/pipelines", nil, &pipes)
		if len(pipes) != 1 || pipes[0].ProjectID != c.id {
			t.Errorf("pipelines of %s: %+v, want the one of project %d", c.path, pipes, c.id)
		}
	}
	resp, body := inst.Do(t, "GET", "/api/v4/projects/jobapi%2Fnobody-has-this/pipelines", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusNotFound)
	resp, body = jobapitest.Send(t, inst.URL, "GET", "/api/v4/projects/jobapi%2Fnobody-has-this/pipelines", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusUnauthorized)
}
