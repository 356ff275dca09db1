package cisource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/ciconfig"
)

// TestGitCacheRefusesOptions: a revision or a path that starts with '-' never reaches git,
// whatever the caller checked before (--upload-pack=<command> once ran on the server).
func TestGitCacheRefusesOptions(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	sha := h.commit(map[string]string{"a.yml": "a: {script: x}\n"})
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	marker := func(name string) (rev, path string) {
		path = filepath.Join(dir, name)
		return "--upload-pack=touch " + path + ";git-upload-pack", path
	}
	refused := func(what string, err error, file string) {
		t.Helper()
		var ie *ciconfig.IncludeError
		if !errors.As(err, &ie) || !strings.Contains(ie.Message, "starts with '-'") || ie.Transient {
			t.Errorf("%s: %v, want a permanent IncludeError saying it starts with '-'", what, err)
		}
		if file == "" {
			return
		}
		if _, err := os.Stat(file); err == nil {
			t.Errorf("%s: the injected command ran (%s exists)", what, file)
		}
	}
	rev, file := marker("read")
	_, err = g.Read(ctx, h.remote(), rev, "a.yml")
	refused("Read at "+rev, err, file)
	_, err = g.Read(ctx, h.remote(), sha, "-a.yml")
	refused("Read of -a.yml", err, "")
	rev, file = marker("list")
	_, err = g.List(ctx, h.remote(), rev)
	refused("List at "+rev, err, file)
	rev, file = marker("changed")
	_, err = g.Changed(ctx, h.remote(), rev, sha)
	refused("Changed at "+rev, err, file)
	rev, file = marker("mergebase")
	_, err = g.MergeBase(ctx, h.remote(), rev, "main")
	refused("MergeBase at "+rev, err, file)
	// compare_to was refused before (the review found it held): it still is.
	rev, file = marker("compare_to")
	if _, err := g.MergeBase(ctx, h.remote(), sha, rev); !errors.Is(err, ciconfig.ErrRevisionNotFound) {
		t.Errorf("MergeBase with %s: %v, want ErrRevisionNotFound", rev, err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Errorf("compare_to %s ran", rev)
	}
	// What is not an option still reads.
	if got, err := g.Read(ctx, h.remote(), "main", "a.yml"); err != nil || string(got) != "a: {script: x}\n" {
		t.Errorf("Read at main: %q, %v", got, err)
	}
}
