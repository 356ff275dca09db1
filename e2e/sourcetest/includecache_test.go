package sourcetest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// A real `jobapi serve` keeps the repositories of include: local in a directory of its own
// under the temporary directory, and removes it when SIGTERM stops it. At start it removes
// what a replica killed before its shutdown left (its lock free), and leaves alone the
// directory of a live replica (its lock held) and one without a lock file.
func TestIncludeCacheRemovedOnSIGTERM(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	mkdir := func(name string, lock bool) *os.File {
		t.Helper()
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(dir, "0123.git"), 0o700); err != nil {
			t.Fatal(err)
		}
		if !lock {
			return nil
		}
		f, err := os.Create(filepath.Join(dir, ".lock"))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	mkdir("jobapi-includes-dead", true).Close()
	live := mkdir("jobapi-includes-live", true)
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	mkdir("jobapi-includes-legacy", false)
	list := func() []string {
		t.Helper()
		dirs, err := filepath.Glob(filepath.Join(tmp, "jobapi-includes-*"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range dirs {
			dirs[i] = filepath.Base(dirs[i])
		}
		return dirs
	}

	bare, sha := includeRepo(t)
	bin := jobapitest.BuildJobapi(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	child, logs := jobapitest.StartServe(t, bin, inst.Config, map[string]string{"TMPDIR": tmp})
	base := jobapitest.ServeURL(t, logs.String())
	var own string
	for _, d := range list() {
		if !slices.Contains([]string{"jobapi-includes-live", "jobapi-includes-legacy"}, d) {
			if own != "" || d == "jobapi-includes-dead" {
				t.Fatalf("after start: %v, want the live, the legacy and the replica's own", list())
			}
			own = d
		}
	}
	if own == "" {
		t.Fatalf("after start: %v, no directory of the replica's own", list())
	}

	resp, body := jobapitest.Send(t, base, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + bare},
		"PRIVATE-TOKEN", jobapitest.AdminToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create project: %d %s", resp.StatusCode, body)
	}
	resp, body = jobapitest.Send(t, base, "POST", "/api/v4/projects/1/pipeline?ref=main&sha="+sha,
		"include: ci/test.yml\nstages: [test]\n", "PRIVATE-TOKEN", jobapitest.AdminToken, "Content-Type", "application/yaml")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("pipeline with include: local: %d %s", resp.StatusCode, body)
	}
	repos, _ := filepath.Glob(filepath.Join(tmp, own, "*.git"))
	if len(repos) == 0 {
		t.Fatalf("the cache %s holds no repository after an include: local", own)
	}

	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("jobapi serve after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("jobapi serve did not stop within 60 s of SIGTERM")
	}
	if got := list(); !slices.Equal(got, []string{"jobapi-includes-legacy", "jobapi-includes-live"}) {
		t.Errorf("after SIGTERM: %v, want only the live and the legacy directories", got)
	}
}
