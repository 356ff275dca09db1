package sourcetest_test

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// cacheKeyCI keys the npm cache on package-lock.json's content and the Go cache on go.sum's
// last commit, as real projects write it.
const cacheKeyCI = `
default:
  cache:
    key:
      files_commits: [go.sum]
    paths: [.cache/go]
npm:
  script: npm ci
  cache:
    - key:
        files: [package-lock.json]
        prefix: npm
      paths: [node_modules/]
    - key:
        files: ['**/yarn.lock']
      paths: [web/node_modules/]
go:
  script: go test ./...
`

// digest is GitLab's cache key digest of ids: the SHA-1 of them sorted and joined with "-".
func digest(ids ...string) string {
	slices.Sort(ids)
	sum := sha1.Sum([]byte(strings.Join(ids, "-")))
	return hex.EncodeToString(sum[:])
}

// TestCacheKeyFromRepositoryFiles: cache:key:files and files_commits are computed from the
// project's repository at the pipeline's commit, read with git as include: local is, and
// reach the runner in the job payload (with GitLab's -protected/-non_protected suffix):
// files follows the content (a commit that leaves package-lock.json as it was keeps the
// key, a branch with the same file shares it), files_commits follows go.sum's last commit
// (a commit that rewrites it with the same text changes the key).
func TestCacheKeyFromRepositoryFiles(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	lock1 := "{\"lockfileVersion\": 3}\n"
	gosum := "example.com/x v1.0.0 h1:abc=\n"
	first := m.Commit(map[string]string{".gitlab-ci.yml": cacheKeyCI, "package-lock.json": lock1, "go.sum": gosum,
		"web/yarn.lock": "# yarn\n", "README.md": "one\n"})
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "keys", "repo_url": "file://" + m.Bare}, &project)
	r := inst.NewRunner(t)
	keysAt := func(ref string) map[string][]string {
		t.Helper()
		var p api.Pipeline
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID), map[string]any{"ref": ref}, &p)
		out := map[string][]string{}
		for range 2 {
			job := r.Take(t)
			for _, c := range job.Cache {
				key, ok := strings.CutSuffix(c.Key, "-non_protected")
				if !ok {
					key, ok = strings.CutSuffix(c.Key, "-protected")
				}
				if !ok {
					t.Errorf("%s: cache key %q has no -protected or -non_protected suffix", job.JobInfo.Name, c.Key)
				}
				out[job.JobInfo.Name] = append(out[job.JobInfo.Name], key)
			}
			r.Finish(t, job, "success", "")
		}
		return out
	}
	blob := func(sha, path string) string { return git(t, m.Work, "rev-parse", sha+":"+path) }

	want := map[string][]string{
		"npm": {"npm-" + digest(blob(first, "package-lock.json")), "1-" + digest(blob(first, "web/yarn.lock"))},
		"go":  {"0-" + digest(first)},
	}
	if got := keysAt("main"); !equalKeys(got, want) {
		t.Fatalf("keys at the first commit %v, want %v", got, want)
	}

	// A commit that changes neither file: every key stays.
	m.Commit(map[string]string{"README.md": "two\n"})
	if got := keysAt("main"); !equalKeys(got, want) {
		t.Errorf("keys after a README change %v, want the same %v", got, want)
	}

	// go.sum rewritten and put back: the same text, two new commits. files_commits follows
	// the commit, files (npm) the content.
	m.Commit(map[string]string{"go.sum": gosum + "example.com/y v1.0.0 h1:def=\n"})
	back := m.Commit(map[string]string{"go.sum": gosum})
	want["go"] = []string{"0-" + digest(back)}
	if got := keysAt("main"); !equalKeys(got, want) {
		t.Errorf("keys after go.sum came back to its text %v, want %v", got, want)
	}

	// A branch that changes package-lock.json gets a key of its own; one that does not
	// shares main's.
	git(t, m.Work, "checkout", "--quiet", "-b", "bump")
	bumped := m.Commit(map[string]string{"package-lock.json": "{\"lockfileVersion\": 3, \"packages\": {}}\n"})
	if got := keysAt("bump"); got["npm"][0] != "npm-"+digest(blob(bumped, "package-lock.json")) || got["npm"][0] == want["npm"][0] {
		t.Errorf("npm key on a branch that changed package-lock.json: %v; want a new one (main's is %s)", got["npm"], want["npm"][0])
	}
	git(t, m.Work, "checkout", "--quiet", "-b", "docs", back)
	m.Commit(map[string]string{"README.md": "docs\n"})
	if got := keysAt("docs"); !slices.Equal(got["npm"], want["npm"]) {
		t.Errorf("npm keys on a branch with main's package-lock.json %v, want main's %v", got["npm"], want["npm"])
	}
}

func equalKeys(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
