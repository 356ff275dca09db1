package jobapitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ModuleRoot returns the directory that holds jobapi's go.mod, for tests that read a file of
// the repository (openapi.yaml) or build one of its commands. It walks up from the working
// directory (go test runs a test in its package's folder), so a suite finds the root however
// deep it sits.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// Git runs git in dir with a fixed identity and no user or system config; a failure fails
// the test. It returns the trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=jobapi", "GIT_AUTHOR_EMAIL=jobapi@example.com",
		"GIT_COMMITTER_NAME=jobapi", "GIT_COMMITTER_EMAIL=jobapi@example.com", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// GitRepo is a work tree and its bare remote on branch main: a project's repository that
// a test commits and pushes to.
type GitRepo struct {
	T          testing.TB
	Work, Bare string
}

// NewGitRepo makes an empty bare repository and a work tree beside it; git must be on PATH.
func NewGitRepo(t testing.TB) *GitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("these tests need git on PATH:", err)
	}
	root := t.TempDir()
	g := &GitRepo{T: t, Work: filepath.Join(root, "work"), Bare: filepath.Join(root, "app.git")}
	Git(t, root, "init", "--quiet", "--bare", "--initial-branch=main", g.Bare)
	Git(t, root, "init", "--quiet", "--initial-branch=main", g.Work)
	return g
}

// Commit writes files on the current branch, commits, pushes the branch and returns the sha.
func (g *GitRepo) Commit(files map[string]string) string {
	g.T.Helper()
	for name, text := range files {
		p := filepath.Join(g.Work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			g.T.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			g.T.Fatal(err)
		}
	}
	Git(g.T, g.Work, "add", "-A")
	Git(g.T, g.Work, "commit", "--quiet", "-m", "change")
	Git(g.T, g.Work, "push", "--quiet", g.Bare, "HEAD")
	return Git(g.T, g.Work, "rev-parse", "HEAD")
}
