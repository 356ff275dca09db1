package userstest_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestPythonGitlabUsers runs python-gitlab (Debian's python3-gitlab) on the users and
// personal access token calls across two replicas: users created, listed, read, updated,
// a duplicate refused; tokens created for a user, authenticating as PRIVATE-TOKEN and as
// a Bearer, read_api refused a POST (403 insufficient_scope), listed, revoked (401 on both
// replicas), a blocked user 403, a deleted user's token 401 (testdata/users_tokens.py).
func TestPythonGitlabUsers(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	a := jobapitest.Start(t, jobapitest.Options{})
	b := a.Replica(t, jobapitest.Options{})
	out, err := exec.Command(python, "testdata/users_tokens.py", a.URL, b.URL, jobapitest.AdminToken).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}
