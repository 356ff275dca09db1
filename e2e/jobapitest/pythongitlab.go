package jobapitest

import (
	"os/exec"
	"testing"
)

// PythonGitlab returns a python3 that imports python-gitlab (Debian's python3-gitlab), the
// real GitLab API client the suites drive the operator API with. Without one the test fails:
// .ci/run installs it, and a run without it must say so, not pass without trying.
func PythonGitlab(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import gitlab").Run() == nil {
			return p
		}
	}
	t.Fatal("python-gitlab is not installed: apt-get install python3-gitlab (Debian's, for /usr/bin/python3)")
	return ""
}
