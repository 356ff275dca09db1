package cisource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/ciconfig"
)

// history is a work tree whose commits tests make one by one, and a bare clone of it
// (the remote) they push to.
type history struct {
	t          *testing.T
	work, bare string
}

func newHistory(t *testing.T) *history {
	h := &history{t: t, work: t.TempDir(), bare: filepath.Join(t.TempDir(), "repo.git")}
	h.git("init", "--quiet", "--initial-branch=main")
	h.git("init", "--quiet", "--bare", h.bare)
	return h
}

func (h *history) remote() string { return "file://" + h.bare }

func (h *history) git(args ...string) string {
	h.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = h.work
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (an empty text deletes the file), commits, pushes every branch and
// tag, and returns the commit's sha.
func (h *history) commit(files map[string]string) string {
	h.t.Helper()
	for name, text := range files {
		p := filepath.Join(h.work, name)
		if text == "" {
			if err := os.Remove(p); err != nil {
				h.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
	h.git("add", "-A")
	h.git("commit", "--quiet", "--allow-empty", "-m", "change")
	h.git("push", "--quiet", "--all", "--force", h.bare)
	h.git("push", "--quiet", "--tags", h.bare)
	return h.git("rev-parse", "HEAD")
}

func TestGitCacheChanged(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	c1 := h.commit(map[string]string{"services/api/main.go": "package main\n", "services/web/app.ts": "x\n", "README.md": "r\n"})
	c2 := h.commit(map[string]string{"services/api/main.go": "package main // v2\n", "docs/new.md": "n\n"})
	h.git("mv", "README.md", "docs/README.md")
	c3 := h.commit(nil)
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		base, rev string
		want      []string
	}{
		{c1, c2, []string{"docs/new.md", "services/api/main.go"}},
		{c2, c3, []string{"README.md", "docs/README.md"}}, // a rename: both paths, as GitLab's diff stats
		{c1, c1, nil},
		{c1, "main", []string{"README.md", "docs/README.md", "docs/new.md", "services/api/main.go"}},
	} {
		got, err := g.Changed(ctx, h.remote(), tc.rev, tc.base)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Changed %.7s..%.7s = %v, %v; want %v", tc.base, tc.rev, got, err, tc.want)
		}
	}
	// A base the repository does not have is ErrRevisionNotFound (a 400 upstream), not an
	// empty diff.
	if _, err := g.Changed(ctx, h.remote(), c2, strings.Repeat("1", 40)); !errors.Is(err, ciconfig.ErrRevisionNotFound) {
		t.Errorf("unknown base: %v", err)
	}
	if _, err := g.Changed(ctx, h.remote(), c2, "main"); !errors.Is(err, ciconfig.ErrRevisionNotFound) {
		t.Errorf("base not a sha: %v", err)
	}
	// An unreachable remote is the user's IncludeError, its credentials kept out.
	var ie *ciconfig.IncludeError
	_, err = g.Changed(ctx, "https://deploy:s3cret-token@127.0.0.1:1/group/app.git", c2, c1)
	if !errors.As(err, &ie) || strings.Contains(err.Error(), "s3cret-token") {
		t.Errorf("unreachable remote: %v", err)
	}
}

// TestGitCacheChangedStopsAtTheLimit: git is stopped once the limit is read.
func TestGitCacheChangedStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	c1 := h.commit(map[string]string{"keep": "k\n"})
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("gen/%02d.txt", i)] = "x\n"
	}
	c2 := h.commit(files)
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	err = g.at(context.Background(), h.remote(), c2, func(ctx context.Context, r *repo, object string) error {
		if err := r.fetchRevs(ctx, h.remote(), false, c1); err != nil {
			return err
		}
		names, err = r.gitNames(ctx, 5, "diff", "--name-only", "-z", c1, object)
		return err
	})
	if err != nil || !slices.Equal(names, []string{"gen/00.txt", "gen/01.txt", "gen/02.txt", "gen/03.txt", "gen/04.txt"}) {
		t.Errorf("gitNames = %v, %v", names, err)
	}
}

func TestGitCacheMergeBase(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	c1 := h.commit(map[string]string{"a.txt": "1\n"})
	h.git("tag", "v1", c1)
	c2 := h.commit(map[string]string{"a.txt": "2\n"}) // main moves on
	h.git("checkout", "--quiet", "-b", "feature", c1)
	f1 := h.commit(map[string]string{"services/web/x.ts": "x\n"})
	f2 := h.commit(map[string]string{"services/web/y.ts": "y\n"})
	h.git("checkout", "--quiet", "--orphan", "unrelated")
	h.git("rm", "--quiet", "-rf", ".")
	u1 := h.commit(map[string]string{"other.txt": "o\n"})

	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The cache first holds feature's tip shallowly, as an include read leaves it: the merge
	// base needs the history, which MergeBase fetches.
	if _, err := g.List(ctx, h.remote(), f2); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"main", "refs/heads/main", "v1", "refs/tags/v1", c2, c1} {
		base, err := g.MergeBase(ctx, h.remote(), f2, other)
		if err != nil || base != c1 {
			t.Errorf("MergeBase(feature, %s) = %s, %v; want %s", other, base, err, c1)
		}
	}
	if base, err := g.MergeBase(ctx, h.remote(), f2, "feature"); err != nil || base != f2 {
		t.Errorf("MergeBase with itself = %s, %v", base, err)
	}
	changed, err := g.Changed(ctx, h.remote(), f2, c1)
	if err != nil || !slices.Equal(changed, []string{"services/web/x.ts", "services/web/y.ts"}) {
		t.Errorf("feature since its merge base: %v, %v", changed, err)
	}
	_ = f1
	// No shared history: the empty tree, so every file is changed.
	base, err := g.MergeBase(ctx, h.remote(), u1, "main")
	if err != nil || base != emptyTree {
		t.Errorf("unrelated: %s, %v", base, err)
	}
	if changed, err := g.Changed(ctx, h.remote(), u1, base); err != nil || !slices.Equal(changed, []string{"other.txt"}) {
		t.Errorf("unrelated diff: %v, %v", changed, err)
	}
	for _, bad := range []string{"no-such-branch", strings.Repeat("1", 40), "--upload-pack=touch /tmp/x", "main..feature", "a b"} {
		if _, err := g.MergeBase(ctx, h.remote(), f2, bad); !errors.Is(err, ciconfig.ErrRevisionNotFound) {
			t.Errorf("MergeBase(%q): %v, want ErrRevisionNotFound", bad, err)
		}
	}
}
