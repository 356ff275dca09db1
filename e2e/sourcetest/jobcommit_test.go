package sourcetest_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestJobCommitAndUser: a job in GitLab's shape carries its pipeline's commit as the
// project's repository has it (title, message, author, committer, dates, parents) and the
// pipeline's creator as `user`, and so does a pipeline: the admin token's holder for a
// pipeline created with it, the trigger for a triggered one. A pipeline posted with a
// commit the repository does not have shows that commit by id only. Before, jobs had
// neither field and pipelines no user.
func TestJobCommitAndUser(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	parent := m.Commit(map[string]string{".gitlab-ci.yml": "build: {script: make}\n"})
	if err := os.WriteFile(filepath.Join(m.Work, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, m.Work, "add", "-A")
	git(t, m.Work, "commit", "--quiet", "--author", "Ada Lovelace <ada@example.com>", "--date", "2024-05-06T07:08:09+02:00",
		"-m", "Add the README\n\nSo that people know what this is.")
	git(t, m.Work, "push", "--quiet", m.Bare, "HEAD")
	sha := git(t, m.Work, "rev-parse", "HEAD")

	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare}, &project)
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID), map[string]any{"ref": "main"}, &p)
	if p.User == nil || p.User.Username != "admin" || p.User.ID != 1 {
		t.Errorf("pipeline created with the admin token: user %+v, want admin (id 1)", p.User)
	}
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", project.ID, p.ID), nil, &p)
	if p.User == nil || p.User.Username != "admin" {
		t.Errorf("pipeline read again: user %+v, want admin", p.User)
	}

	var jobs []api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs", project.ID), nil, &jobs)
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v, want build", jobs)
	}
	c := jobs[0].Commit
	if c == nil || c.ID != sha || c.ShortID != sha[:8] || c.Title == nil || *c.Title != "Add the README" {
		t.Fatalf("job commit %+v, want %s titled 'Add the README'", c, sha)
	}
	authored := time.Date(2024, 5, 6, 5, 8, 9, 0, time.UTC)
	if *c.Message != "Add the README\n\nSo that people know what this is.\n" || *c.AuthorName != "Ada Lovelace" ||
		*c.AuthorEmail != "ada@example.com" || !c.AuthoredDate.Equal(authored) || *c.CommitterName != "jobapi" ||
		*c.CommitterEmail != "jobapi@example.com" || len(c.ParentIDs) != 1 || c.ParentIDs[0] != parent ||
		!strings.HasSuffix(c.WebURL, "/-/commit/"+sha) {
		t.Errorf("job commit %+v (message %q, author %q <%q> at %v, committer %q, parents %v), want Ada's commit at %v on %s",
			c, *c.Message, *c.AuthorName, *c.AuthorEmail, c.AuthoredDate, *c.CommitterName, c.ParentIDs, authored, parent)
	}
	if u := jobs[0].User; u == nil || u.Username != "admin" {
		t.Errorf("job user %+v, want admin", u)
	}
	var job api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/jobs/%d", project.ID, jobs[0].ID), nil, &job)
	if job.Commit == nil || job.Commit.ID != sha || job.User == nil {
		t.Errorf("GET job: commit %+v user %+v", job.Commit, job.User)
	}

	// A triggered pipeline's user is the trigger.
	var trig api.Trigger
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/triggers", project.ID), map[string]any{"description": "ci"}, &trig)
	resp, b := jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/trigger/pipeline", project.ID),
		map[string]any{"token": trig.Token, "ref": "main"})
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if tp := decode[api.Pipeline](t, b); tp.User == nil || tp.User.Username != fmt.Sprintf("trigger #%d", trig.ID) || tp.User.ID != 0 {
		t.Errorf("triggered pipeline's user %+v, want trigger #%d", tp.User, trig.ID)
	}

	// A commit the repository does not have: by id only.
	other := strings.Repeat("cd", 20)
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID),
		map[string]any{"ref": "main", "sha": other, "ci_config": "posted: {script: x}\n"}, &p)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/jobs", project.ID, p.ID), nil, &jobs)
	if len(jobs) != 1 || jobs[0].Commit == nil || jobs[0].Commit.ID != other || jobs[0].Commit.ShortID != other[:8] || jobs[0].Commit.Title != nil {
		t.Errorf("posted pipeline's job commit %+v, want %s by id only", jobs[0].Commit, other)
	}
}
