package cisource

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/ciconfig"
)

// TestGitCacheHead: a name is a branch or a tag of the remote (an annotated tag peeled to
// its commit), full names choose between a branch and a tag of the same name, and what
// cannot be resolved says why: unknown, ambiguous, or the remote unreadable (transient, its
// credentials not shown).
func TestGitCacheHead(t *testing.T) {
	t.Parallel()
	remote, first := gitRepo(t, map[string]string{".gitlab-ci.yml": "build: {script: make}\n"})
	bare := strings.TrimPrefix(remote, "file://")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir", bare}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tree := run("rev-parse", first+"^{tree}")
	second := run("commit-tree", "-p", first, "-m", "second", tree)
	run("update-ref", "refs/heads/main", second)
	run("tag", "-a", "-m", "release", "v1.0", first)
	run("tag", "light", first)
	run("branch", "same", first)
	run("tag", "same", second)

	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		ref, wantRef, wantSHA, pipelineRef string
	}{
		{"main", "refs/heads/main", second, "main"},
		{"refs/heads/main", "refs/heads/main", second, "main"},
		{"v1.0", "refs/tags/v1.0", first, "refs/tags/v1.0"},
		{"light", "refs/tags/light", first, "refs/tags/light"},
		{"refs/heads/same", "refs/heads/same", first, "same"},
		{"refs/tags/same", "refs/tags/same", second, "refs/tags/same"},
	} {
		h, err := g.Head(ctx, remote, c.ref)
		if err != nil || h.Ref != c.wantRef || h.SHA != c.wantSHA || h.PipelineRef() != c.pipelineRef {
			t.Errorf("Head(%q) = %+v (pipeline ref %q), %v; want %s at %s (%s)", c.ref, h, h.PipelineRef(), err, c.wantRef, c.wantSHA, c.pipelineRef)
			continue
		}
		// The commit is in the cache now: reading the file at it fetches nothing more.
		fetches := g.repos[filepathBase(t, g)].fetches
		if _, err := g.Read(ctx, remote, h.SHA, ".gitlab-ci.yml"); err != nil || g.repos[filepathBase(t, g)].fetches != fetches {
			t.Errorf("Read at %s after Head: %v, fetches %d → %d", h.SHA, err, fetches, g.repos[filepathBase(t, g)].fetches)
		}
	}

	for ref, want := range map[string]string{
		"nope":            `ref "nope" is neither a branch nor a tag`,
		"refs/tags/main":  `ref "refs/tags/main" is neither a branch nor a tag`,
		"same":            `ref "same" is ambiguous`,
		"--upload-pack=x": "git would take it for an option",
	} {
		_, err := g.Head(ctx, remote, ref)
		var ie *ciconfig.IncludeError
		if !errors.As(err, &ie) || !strings.Contains(ie.Message, want) || ie.Transient {
			t.Errorf("Head(%q) = %v; want a lasting IncludeError with %q", ref, err, want)
		}
	}

	// An unreachable remote: transient, named without its password.
	_, err = g.Head(ctx, "https://user:s3cret-pass@127.0.0.1:1/app.git", "main")
	var ie *ciconfig.IncludeError
	if !errors.As(err, &ie) || !ie.Transient || !strings.Contains(ie.Message, "could not be read") || strings.Contains(ie.Message, "s3cret") {
		t.Errorf("unreachable remote: %v; want a transient IncludeError without the password", err)
	}
}
