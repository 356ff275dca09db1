package cisource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/ciconfig"
)

// gitRepo makes a bare repository with one commit holding files and returns its file://
// URL and the commit's sha.
func gitRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	work := t.TempDir()
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run(work, "init", "--quiet", "--initial-branch=main")
	for name, text := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(work, "add", ".")
	run(work, "commit", "--quiet", "-m", "ci files")
	sha := run(work, "rev-parse", "HEAD")
	bare := filepath.Join(t.TempDir(), "repo.git")
	run(work, "clone", "--quiet", "--bare", work, bare)
	return "file://" + bare, sha
}

func TestGitCacheRead(t *testing.T) {
	t.Parallel()
	remote, sha := gitRepo(t, map[string]string{"ci/build.yml": "build: {script: make}\n", "big.yml": strings.Repeat("#", ciconfig.MaxConfigBytes+1)})
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, rev := range []string{sha, sha, "main"} { // the second read finds the commit in the cache
		got, err := g.Read(ctx, remote, rev, "ci/build.yml")
		if err != nil || string(got) != "build: {script: make}\n" {
			t.Errorf("Read at %s = %q, %v", rev, got, err)
		}
	}
	if g.repos[filepathBase(t, g)].fetches != 2 {
		t.Errorf("fetches %d, want 2 (the sha once, main once)", g.repos[filepathBase(t, g)].fetches)
	}
	if paths, err := g.List(ctx, remote, sha); err != nil || !slices.Equal(paths, []string{"big.yml", "ci/build.yml"}) {
		t.Errorf("List = %v, %v", paths, err)
	}
	if _, err := g.Read(ctx, remote, sha, "missing.yml"); !errors.Is(err, ciconfig.ErrIncludeNotFound) {
		t.Errorf("missing file: %v", err)
	}
	var ie *ciconfig.IncludeError
	if _, err := g.Read(ctx, remote, sha, "big.yml"); !errors.As(err, &ie) || !strings.Contains(ie.Message, "at most 1048576") {
		t.Errorf("file over 1 MiB: %v", err)
	}
	if _, err := g.Read(ctx, remote, strings.Repeat("0", 40), "ci/build.yml"); !errors.As(err, &ie) || ie.Transient {
		t.Errorf("unknown commit: %v, want an IncludeError that is not transient (the user's)", err)
	}
	// Credentials in the remote never reach a message; an unreachable remote is transient
	// (a bridge waits for it).
	_, err = g.Read(ctx, "https://deploy:s3cret-token@127.0.0.1:1/group/app.git", sha, "ci/build.yml")
	if !errors.As(err, &ie) || strings.Contains(err.Error(), "s3cret-token") || !ie.Transient {
		t.Errorf("unreachable remote with credentials: %v, want a transient IncludeError", err)
	}
}

func filepathBase(t *testing.T, g *GitCache) string {
	t.Helper()
	for name := range g.repos {
		return name
	}
	t.Fatal("no repository in the cache")
	return ""
}

// TestGitCacheBounds: at most MaxRepos repositories; the least recently used one goes.
func TestGitCacheBounds(t *testing.T) {
	t.Parallel()
	remote, sha := gitRepo(t, map[string]string{"a.yml": "a: {script: x}\n"})
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The same repository under MaxRepos+1 spellings is MaxRepos+1 remotes.
	for i := range MaxRepos + 1 {
		if _, err := g.Read(context.Background(), remote+strings.Repeat("/", i+1), sha, "a.yml"); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	entries, err := os.ReadDir(g.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.repos) != MaxRepos || len(entries) != MaxRepos {
		t.Errorf("%d repositories known, %d directories; want %d", len(g.repos), len(entries), MaxRepos)
	}
}

func TestRemoteFetch(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ci/lint.yml":
			_, _ = w.Write([]byte("lint: {script: x}\n"))
		case "/big.yml":
			_, _ = w.Write([]byte(strings.Repeat("#", ciconfig.MaxConfigBytes+1)))
		case "/plain.yml":
			http.Redirect(w, r, "http://example.com/ci.yml", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	r := &Remote{Client: srv.Client()}
	ctx := context.Background()
	if got, err := r.Fetch(ctx, srv.URL+"/ci/lint.yml"); err != nil || string(got) != "lint: {script: x}\n" {
		t.Errorf("Fetch = %q, %v", got, err)
	}
	for path, want := range map[string]string{
		"/missing.yml": "HTTP 404",
		"/big.yml":     "larger than 1048576 bytes",
		"/plain.yml":   "not https",
	} {
		var ie *ciconfig.IncludeError
		if _, err := r.Fetch(ctx, srv.URL+path); !errors.As(err, &ie) || !strings.Contains(ie.Message, want) {
			t.Errorf("%s: %v, want an IncludeError with %q", path, err, want)
		}
	}
	// The production client refuses the server's own network.
	var ie *ciconfig.IncludeError
	if _, err := NewRemote().Fetch(ctx, srv.URL+"/ci/lint.yml"); !errors.As(err, &ie) || !strings.Contains(ie.Message, "local or private network") {
		t.Errorf("loopback remote: %v", err)
	}
}

// TestGitCacheConcurrent: requests for more remotes than the cache keeps, at once, all
// read their file while entries are evicted under them.
func TestGitCacheConcurrent(t *testing.T) {
	t.Parallel()
	remote, sha := gitRepo(t, map[string]string{"a.yml": "a: {script: x}\n"})
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*(MaxRepos+4))
	for round := range 3 {
		for i := range MaxRepos + 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := g.Read(context.Background(), remote+strings.Repeat("/", i+1), sha, "a.yml")
				if err == nil && string(got) != "a: {script: x}\n" {
					err = fmt.Errorf("round %d remote %d read %q", round, i, got)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Remote includes connect to global unicast addresses only: each special-purpose range is
// refused, as are the host's own addresses and IPv4 addresses written in IPv6; what held
// before (loopback, private, link-local, metadata) still does.
func TestRemoteAllowsOnlyGlobalUnicast(t *testing.T) {
	t.Parallel()
	own := ownAddresses()
	for addr, want := range map[string]bool{
		"93.184.215.14": true, "2606:2800:21f:cb07:6820:80da:af6b:8b2c": true, "8.8.8.8": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false, "169.254.169.254": false,
		"::1": false, "fe80::1": false, "::ffff:127.0.0.1": false, "::ffff:169.254.169.254": false, "0.0.0.0": false,
		"100.64.0.1": false, "100.127.255.254": false, "198.18.0.1": false, "198.19.255.1": false,
		"192.0.0.8": false, "192.0.2.1": false, "198.51.100.7": false, "203.0.113.9": false, "240.0.0.1": false,
		"255.255.255.255": false, "64:ff9b::7f00:1": false, "64:ff9b::a9fe:a9fe": false, "64:ff9b:1::1": false,
		"2001::1": false, "2001:db8::1": false, "fc00::1": false, "fd12:3456::1": false, "::7f00:1": false,
		"::a9fe:a9fe": false, "2002:7f00:1::1": false, "ff02::1": false, "224.0.0.1": false,
	} {
		if got := allowedRemote(netip.MustParseAddr(addr), own); got != want {
			t.Errorf("%s: allowed %v, want %v", addr, got, want)
		}
	}
	for _, a := range own {
		if allowedRemote(a, own) {
			t.Errorf("the host's own address %s is allowed", a)
		}
	}
	// A global address the host has is refused because it is the host's.
	if allowedRemote(netip.MustParseAddr("93.184.215.14"), []netip.Addr{netip.MustParseAddr("93.184.215.14")}) {
		t.Error("an own global address allowed")
	}

	// At dial time: the production client refuses before it connects, whatever the URL
	// names (an address, a name that resolves to one).
	ctx := context.Background()
	urls := []string{"https://100.64.0.1/ci.yml", "https://198.18.0.1/ci.yml", "https://[64:ff9b::7f00:1]/ci.yml",
		"https://[::ffff:127.0.0.1]/ci.yml", "https://localhost/ci.yml", "https://169.254.169.254/ci.yml"}
	for _, a := range own {
		if a.Is4() {
			urls = append(urls, "https://"+a.String()+"/ci.yml")
		}
	}
	for _, u := range urls {
		var ie *ciconfig.IncludeError
		if _, err := NewRemote().Fetch(ctx, u); !errors.As(err, &ie) || !strings.Contains(ie.Message, "local or private network") {
			t.Errorf("%s: %v, want the local network refused", u, err)
		}
	}
}

// A commit the remote lacks is asked of it once per CommitMissTTL, not on every read (a job
// listing reads the commits of every row), and a commit read is not read again.
func TestGitCacheCommitRemembersAnswers(t *testing.T) {
	t.Parallel()
	remote, sha := gitRepo(t, map[string]string{"a.txt": "a\n"})
	// A commit of another repository, which the remote does not have yet.
	otherRemote, other := gitRepo(t, map[string]string{"b.txt": "b\n"})
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	ctx := context.Background()
	fetches := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.repos[filepathBase(t, g)].fetches
	}

	for range 3 {
		if c, err := g.Commit(ctx, remote, sha); err != nil || c.ID != sha || c.Title() != "ci files" {
			t.Fatalf("Commit(%s) = %+v, %v", sha, c, err)
		}
	}
	if n := fetches(); n != 1 {
		t.Errorf("fetches after three reads of one commit: %d, want 1", n)
	}

	for range 3 {
		if _, err := g.Commit(ctx, remote, other); err == nil {
			t.Fatal("a commit the remote lacks was read")
		}
	}
	if n := fetches(); n != 2 {
		t.Errorf("fetches after three reads of a missing commit: %d, want 2 (one for it)", n)
	}

	// The remote gets the commit: the miss is answered until its time is up, then asked again.
	bare := strings.TrimPrefix(remote, "file://")
	if out, err := exec.Command("git", "-C", bare, "fetch", "--quiet", otherRemote, other+":refs/heads/other").CombinedOutput(); err != nil {
		t.Fatalf("git fetch: %v: %s", err, out)
	}
	if _, err := g.Commit(ctx, remote, other); err == nil {
		t.Error("the remembered miss was not answered within CommitMissTTL")
	}
	now = now.Add(CommitMissTTL)
	if c, err := g.Commit(ctx, remote, other); err != nil || c.ID != other {
		t.Errorf("after CommitMissTTL: %+v, %v", c, err)
	}
	if n := fetches(); n != 3 {
		t.Errorf("fetches: %d, want 3", n)
	}
}
