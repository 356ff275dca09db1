// Package cisource reads what a .gitlab-ci.yml needs beyond its own text: `include: local`
// files and the file list (rules:exists) from the project's repository at the pipeline's
// commit, the files changed since a base commit or a compare_to ref's merge base
// (rules:changes, only/except:changes), all with git in a bounded cache directory; and
// `include: remote` over HTTPS with size and time limits. It serves ciconfig.Includes and
// ciconfig.Repository for one pipeline at a time (Source.For).
package cisource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/gitremote"
)

// Bounds of the git cache: how many repositories it keeps, and how many commits one
// repository takes (each fetch adds a shallow commit) before it is fetched anew, so that
// the directory holds at most MaxRepos × FetchesPerRepo snapshots.
const (
	MaxRepos       = 16
	FetchesPerRepo = 64
	gitTimeout     = 60 * time.Second
)

// GitCache fetches commits of project repositories into Dir, one bare repository per
// remote, and reads files from them.
type GitCache struct {
	Dir string

	// stripes lock the repository directories, by name: a lock outlives the cache's entry
	// of its directory, so that a request that waits for a directory while it is evicted
	// never shares it with one that comes after.
	stripes [64]sync.Mutex
	mu      sync.Mutex
	repos   map[string]*repo // by directory name, under mu
	lock    *os.File         // OpenReplicaCache's lock file, held until Close

	// commits remembers Commit's answers (commitMemo); now is its clock (nil: time.Now).
	commits commitMemo
	now     func() time.Time
}

type repo struct {
	name, dir string
	fetches   int
	used      time.Time
}

// replicaDirPrefix names a replica's own cache directory (OpenReplicaCache) in its parent.
const replicaDirPrefix = "jobapi-includes-"

// OpenReplicaCache returns a cache in a directory of this replica's own under parent (the
// temporary directory), which Close removes at shutdown. The directory holds a lock file
// that the replica keeps locked (flock) while it runs, so that the kernel releases it when
// the process ends however it ends: first the directories under parent whose lock is free,
// left by replicas killed before their shutdown, are removed. A directory without a lock
// file is not judged (an older version's, perhaps of a live process).
func OpenReplicaCache(parent string) (*GitCache, error) {
	sweepReplicaDirs(parent)
	dir, err := os.MkdirTemp(parent, replicaDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("include cache: %w", err)
	}
	// Locked before it has its name, so that a sweep never finds it unlocked.
	f, err := os.CreateTemp(dir, ".lock-")
	if err == nil {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			err = os.Rename(f.Name(), filepath.Join(dir, ".lock"))
		}
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("include cache %s: lock: %w", dir, err)
	}
	g, err := NewGitCache(dir)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	g.lock = f
	return g, nil
}

// sweepReplicaDirs removes the replica directories under parent whose lock no process holds.
func sweepReplicaDirs(parent string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, replicaDirPrefix+"*"))
	for _, dir := range dirs {
		f, err := os.Open(filepath.Join(dir, ".lock"))
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}
		_ = f.Close()
	}
}

// Close removes the cache's directory (with the repositories it holds) and releases its
// lock; call it once nothing reads through the cache any more.
func (g *GitCache) Close() error {
	err := os.RemoveAll(g.Dir)
	if g.lock != nil {
		_ = g.lock.Close()
	}
	return err
}

// NewGitCache returns a cache in dir, created if needed.
func NewGitCache(dir string) (*GitCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("include cache %s: %w", dir, err)
	}
	return &GitCache{Dir: dir, repos: map[string]*repo{}}, nil
}

var fullSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

// maxListed bounds the file list of one commit read for wildcard includes.
const maxListed = 200_000

// List returns the paths of every file at rev (a commit sha, or a branch or tag name) of
// the repository at remote, in git's order.
func (g *GitCache) List(ctx context.Context, remote, rev string) ([]string, error) {
	var out []byte
	err := g.at(ctx, remote, rev, func(ctx context.Context, r *repo, object string) error {
		var err error
		out, err = r.git(ctx, "", "ls-tree", "-r", "-z", "--name-only", "--end-of-options", object)
		return err
	})
	if err != nil {
		return nil, err
	}
	paths := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(paths) > maxListed {
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("the repository has more than %d files to match a glob against", maxListed)}
	}
	return paths, nil
}

// Read returns path at rev (a commit sha, or a branch or tag name) of the repository at
// remote. ciconfig.ErrIncludeNotFound when the commit has no such file; a
// *ciconfig.IncludeError when the repository cannot be fetched or the file is too large.
func (g *GitCache) Read(ctx context.Context, remote, rev, path string) ([]byte, error) {
	if err := notAnOption("path", path); err != nil {
		return nil, err
	}
	var out []byte
	err := g.at(ctx, remote, rev, func(ctx context.Context, r *repo, object string) error {
		spec := object + ":" + path
		size, err := r.git(ctx, "", "cat-file", "-s", "--end-of-options", spec)
		if err != nil {
			return ciconfig.ErrIncludeNotFound
		}
		if n, _ := strconv.ParseInt(strings.TrimSpace(string(size)), 10, 64); n > ciconfig.MaxConfigBytes {
			return &ciconfig.IncludeError{Message: fmt.Sprintf("the file is %d bytes; at most %d (1 MiB) are accepted", n, ciconfig.MaxConfigBytes)}
		}
		if out, err = r.git(ctx, "", "cat-file", "blob", "--end-of-options", spec); err != nil {
			return ciconfig.ErrIncludeNotFound
		}
		return nil
	})
	return out, err
}

// at runs read on the repository of remote with rev fetched, under the directory's lock;
// object names rev's commit there.
func (g *GitCache) at(ctx context.Context, remote, rev string, read func(ctx context.Context, r *repo, object string) error) error {
	if err := notAnOption("revision", rev); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(remote))
	name := hex.EncodeToString(sum[:12]) + ".git"
	lock := g.stripe(name)
	lock.Lock()
	defer lock.Unlock()
	r, err := g.repo(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	if _, err := os.Stat(r.dir); err != nil {
		if _, err := r.git(ctx, "", "init", "--quiet", "--bare", r.dir); err != nil {
			return fmt.Errorf("include cache: git init: %w", err)
		}
	}
	object := rev
	if !fullSHA.MatchString(rev) || !r.has(ctx, rev) {
		if err := r.fetch(ctx, remote, rev); err != nil {
			return err
		}
		if !fullSHA.MatchString(rev) {
			object = "FETCH_HEAD"
		}
	}
	return read(ctx, r, object)
}

func (g *GitCache) stripe(name string) *sync.Mutex {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h*31 + uint32(name[i])
	}
	return &g.stripes[h%uint32(len(g.stripes))]
}

// repo returns the cache entry of directory name, whose lock the caller holds: started
// afresh once it has taken FetchesPerRepo commits; a new one evicts the least recently
// used other when the cache is full.
func (g *GitCache) repo(name string) (*repo, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repos[name]
	if ok && r.fetches >= FetchesPerRepo {
		delete(g.repos, name)
		ok = false
	}
	if !ok {
		if len(g.repos) >= MaxRepos {
			g.evictOldest()
		}
		r = &repo{name: name, dir: filepath.Join(g.Dir, name)}
		// Whatever a former entry left there goes: the caller holds the directory's lock.
		if err := os.RemoveAll(r.dir); err != nil {
			return nil, fmt.Errorf("include cache: %w", err)
		}
		g.repos[name] = r
	}
	r.used = time.Now()
	return r, nil
}

// evictOldest removes the least recently used repository whose directory is not in use
// (its lock is free); when all are, the cache holds one more for a while. It never waits
// for a lock: its caller holds g.mu and a directory's lock.
func (g *GitCache) evictOldest() {
	victims := make([]*repo, 0, len(g.repos))
	for _, r := range g.repos {
		victims = append(victims, r)
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].used.Before(victims[j].used) })
	for _, r := range victims {
		lock := g.stripe(r.name)
		if !lock.TryLock() {
			continue
		}
		_ = os.RemoveAll(r.dir) // a directory left behind is emptied on its next use
		lock.Unlock()
		delete(g.repos, r.name)
		return
	}
}

func (r *repo) has(ctx context.Context, sha string) bool {
	_, err := r.git(ctx, "", "cat-file", "-e", "--end-of-options", sha+"^{commit}")
	return err == nil
}

// fetch brings rev (shallow: the commit's tree only) from remote. The remote, which may
// carry credentials, goes to git through its environment, not its arguments, and never
// into a message.
func (r *repo) fetch(ctx context.Context, remote, rev string) error {
	r.fetches++
	if _, err := r.git(ctx, remote, "fetch", "--quiet", "--depth=1", "--no-tags", "--end-of-options", "origin", rev); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, context.DeadlineExceeded) {
			// A commit the remote does not have is the user's; anything else (the remote
			// unreachable, slow, refusing) may pass: Transient, which a bridge waits out.
			return &ciconfig.IncludeError{Message: fmt.Sprintf("the project's repository %s could not be fetched at %s: %v",
				gitremote.Redact(remote), rev, redact(err, remote)), Transient: !missingRef(err.Error())}
		}
		return err
	}
	return nil
}

// notAnOption refuses a revision or a path that git could read as an option
// (--upload-pack=<command> runs that command): whatever the caller checked, none reaches
// git. Every call also puts --end-of-options before its revisions and paths.
func notAnOption(what, s string) error {
	if strings.HasPrefix(s, "-") {
		return &ciconfig.IncludeError{Message: fmt.Sprintf("the %s %.60q starts with '-'; git would take it for an option", what, s)}
	}
	return nil
}

// git runs git in the repository; with remote set, as remote "origin".
func (r *repo) git(ctx context.Context, remote string, args ...string) ([]byte, error) {
	if args[0] != "init" {
		args = append([]string{"--git-dir", r.dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = gitEnv(remote)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// gitEnv is git's environment: no prompts, no user or system configuration; with remote
// set, that remote as "origin" (through the environment, never the arguments).
func gitEnv(remote string) []string {
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_SSH_COMMAND=ssh -o BatchMode=yes",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if remote != "" {
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=remote.origin.url", "GIT_CONFIG_VALUE_0="+remote)
	}
	return env
}

// redact removes the remote (and its credentials) from git's message: the remote as given,
// and its password (for http(s) its user name too, often a token), raw and decoded, in
// whatever form git printed them (git:// as "user:password@host:port", scp-like as the ssh
// user).
func redact(err error, remote string) string {
	msg := err.Error()
	if remote != "" {
		msg = strings.ReplaceAll(msg, remote, gitremote.Redact(remote))
		for _, secret := range remoteSecrets(remote) {
			msg = strings.ReplaceAll(msg, secret, "*****")
		}
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return msg
}

// remoteSecrets are the credentials in remote, each raw and decoded.
func remoteSecrets(remote string) []string {
	var secrets []string
	add := func(raw string) {
		if raw == "" {
			return
		}
		secrets = append(secrets, raw)
		if dec, err := url.PathUnescape(raw); err == nil && dec != raw {
			secrets = append(secrets, dec)
		}
	}
	if !strings.Contains(remote, "://") {
		if at := strings.Index(remote, "@"); at > 0 && !strings.Contains(remote[:at], "/") {
			if _, pass, ok := strings.Cut(remote[:at], ":"); ok {
				add(pass)
			}
		}
		return secrets
	}
	scheme, rest, _ := strings.Cut(remote, "://")
	host, _, _ := strings.Cut(rest, "/")
	at := strings.LastIndex(host, "@")
	if at < 0 {
		return nil
	}
	user, pass, hasPass := strings.Cut(host[:at], ":")
	if hasPass {
		add(pass)
	}
	if scheme == "https" || scheme == "http" {
		add(user)
	}
	return secrets
}
