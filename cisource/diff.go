package cisource

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/gitremote"
)

// emptyTree is git's empty tree: the base of a commit whose history shares nothing with
// compare_to's, so that every file of it counts as changed.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// Changed lists the files that differ between base (a full sha) and rev of the repository
// at remote, as GitLab's diff_stats paths: a rename is its old and its new path. At most
// ciconfig.MaxChangedPaths+1 are read; git is stopped past them. ciconfig.ErrRevisionNotFound
// when the repository has no commit base.
func (g *GitCache) Changed(ctx context.Context, remote, rev, base string) ([]string, error) {
	if !fullSHA.MatchString(base) {
		return nil, ciconfig.ErrRevisionNotFound
	}
	var out []string
	err := g.at(ctx, remote, rev, func(ctx context.Context, r *repo, object string) error {
		if base != emptyTree && !r.has(ctx, base) {
			if err := r.fetchRevs(ctx, remote, false, base); err != nil {
				return err
			}
		}
		var err error
		out, err = r.gitNames(ctx, ciconfig.MaxChangedPaths+1, "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--end-of-options", base, object, "--")
		return err
	})
	return out, err
}

// MergeBase returns the best common ancestor of other (a branch or tag name, refs/..., or
// a full sha) and rev, fetching both histories whole (a shallow cache is deepened): a
// merge base needs them. ciconfig.ErrRevisionNotFound when the remote has no such ref; git's
// empty tree when the two share no history, so that every file counts as changed.
func (g *GitCache) MergeBase(ctx context.Context, remote, rev, other string) (string, error) {
	if other == "" || strings.HasPrefix(other, "-") || strings.ContainsAny(other, " \t\r\n:^~\\?*[") || strings.Contains(other, "..") {
		return "", ciconfig.ErrRevisionNotFound
	}
	var base string
	err := g.at(ctx, remote, rev, func(ctx context.Context, r *repo, object string) error {
		head, err := r.git(ctx, "", "rev-parse", "--verify", "--end-of-options", object+"^{commit}")
		if err != nil {
			return fmt.Errorf("resolve %s: %w", rev, err)
		}
		if err := r.fetchRevs(ctx, remote, true, "+"+other+":"+compareRef); err != nil {
			return err
		}
		otherSHA, err := r.git(ctx, "", "rev-parse", "--verify", "--end-of-options", compareRef+"^{commit}")
		if err != nil {
			return ciconfig.ErrRevisionNotFound // a ref naming a tree or a blob
		}
		mb, err := r.git(ctx, "", "merge-base", "--end-of-options", strings.TrimSpace(string(head)), strings.TrimSpace(string(otherSHA)))
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 1: // no common ancestor
			base = emptyTree
		case err != nil:
			return fmt.Errorf("git merge-base: %w", err)
		default:
			base = strings.TrimSpace(string(mb))
		}
		return nil
	})
	return base, err
}

// compareRef holds compare_to's commit while a merge base is computed, under the
// directory's lock.
const compareRef = "refs/jobapi/compare"

// fetchRevs fetches refspecs from remote: shallow (the commits' trees only) or with their
// whole history. A remote that answers without the ref is ciconfig.ErrRevisionNotFound; one
// that cannot be reached is the user's IncludeError, without the remote's credentials.
func (r *repo) fetchRevs(ctx context.Context, remote string, history bool, refspecs ...string) error {
	r.fetches++
	args := []string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head"}
	if !history {
		args = append(args, "--depth=1")
	} else if out, err := r.git(ctx, "", "rev-parse", "--is-shallow-repository"); err == nil && strings.TrimSpace(string(out)) == "true" {
		args = append(args, "--unshallow")
	}
	_, err := r.git(ctx, remote, append(append(args, "--end-of-options", "origin"), refspecs...)...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && missingRef(err.Error()):
		return ciconfig.ErrRevisionNotFound
	case errors.As(err, &ee) || errors.Is(err, context.DeadlineExceeded):
		return &ciconfig.IncludeError{Message: fmt.Sprintf("the project's repository %s could not be fetched: %v",
			gitremote.Redact(remote), redact(err, remote)), Transient: true}
	}
	return err
}

// missingRef tells git's "the remote has no such ref or commit" from other failures.
func missingRef(msg string) bool {
	for _, s := range []string{"couldn't find remote ref", "not our ref", "unadvertised object", "no such remote ref", "invalid refspec"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// gitNames runs git, whose output is NUL-separated names, and reads at most limit of them:
// past that git is stopped, so that a huge diff costs neither memory nor time.
func (r *repo) gitNames(ctx context.Context, limit int, args ...string) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"--git-dir", r.dir}, args...)...)
	cmd.Env = gitEnv("")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	var names []string
	for len(names) < limit && sc.Scan() {
		names = append(names, sc.Text())
	}
	stopped := len(names) >= limit
	if stopped {
		cancel()
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	switch {
	case stopped:
		return names, nil
	case sc.Err() != nil:
		return nil, fmt.Errorf("git %s: %w", args[0], sc.Err())
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(stderr.String(), "bad object") {
			return nil, ciconfig.ErrRevisionNotFound
		}
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return names, nil
}
