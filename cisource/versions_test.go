package cisource

import (
	"context"
	"slices"
	"testing"
)

// BlobIDs answers git's own object ids (git rev-parse <sha>:<path>) for files, nothing for
// directories, missing paths and "./"-relative ones; LastCommit reads the history behind a
// commit the cache first fetched shallow, and answers the commit that last touched a path,
// not a later one.
func TestGitCacheFileVersions(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	first := h.commit(map[string]string{"package-lock.json": "{\"v\": 1}\n", "web/yarn.lock": "a\n", "README.md": "r\n"})
	second := h.commit(map[string]string{"web/yarn.lock": "b\n"})
	third := h.commit(map[string]string{"README.md": "r2\n"})
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The pipeline's first read fetches the commit shallow, as an include does.
	if _, err := g.Read(ctx, h.remote(), third, "README.md"); err != nil {
		t.Fatal(err)
	}
	paths := []string{"package-lock.json", "web/yarn.lock", "web", "./package-lock.json", "missing", "web/"}
	got, err := g.BlobIDs(ctx, h.remote(), third, paths)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{h.git("rev-parse", third+":package-lock.json"), h.git("rev-parse", third+":web/yarn.lock"), "", "", "", ""}
	if !slices.Equal(got, want) {
		t.Errorf("BlobIDs(%q) = %q, want %q", paths, got, want)
	}

	for _, c := range []struct{ path, want string }{
		{"package-lock.json", first},
		{"web/yarn.lock", second},
		{"web", second}, // a directory: its last change
		{"README.md", third},
		{"missing", ""},
		{"*.json", ""}, // taken literally, as GitLab asks for a path
	} {
		if got, err := g.LastCommit(ctx, h.remote(), third, c.path); err != nil || got != c.want {
			t.Errorf("LastCommit(%s) at the third commit = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
	// At an earlier commit, a later change does not count.
	if got, err := g.LastCommit(ctx, h.remote(), first, "web/yarn.lock"); err != nil || got != first {
		t.Errorf("LastCommit(web/yarn.lock) at the first commit = %q, %v; want %q", got, err, first)
	}
	if _, err := g.LastCommit(ctx, h.remote(), third, "--output=/tmp/x"); err == nil {
		t.Error("a path that git would read as an option was given to git")
	}
}
