package cisource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/gitremote"
)

// Head is a branch or tag of a repository and the commit at its tip.
type Head struct {
	Ref string // the full name: refs/heads/… or refs/tags/…
	SHA string // the commit (an annotated tag peeled to it)
}

// PipelineRef is the head as a pipeline's ref: a branch by its name, a tag as refs/tags/…
// (gitref.Split's spelling, which tells the two apart).
func (h Head) PipelineRef() string { return strings.TrimPrefix(h.Ref, "refs/heads/") }

// Head finds ref on remote and fetches its tip, as GitLab resolves the ref of a new
// pipeline: a name is a branch or a tag (refs/heads/… or refs/tags/… choose one); a name
// that is both is ambiguous. Its errors are *ciconfig.IncludeError, Transient when the
// remote could not be read (the same call may succeed later), not when the ref is unknown
// or ambiguous. The caller checks ref first (gitref.CheckName).
func (g *GitCache) Head(ctx context.Context, remote, ref string) (Head, error) {
	if err := notAnOption("ref", ref); err != nil {
		return Head{}, err
	}
	candidates := []string{"refs/heads/" + ref, "refs/tags/" + ref}
	if strings.HasPrefix(ref, "refs/heads/") || strings.HasPrefix(ref, "refs/tags/") {
		candidates = []string{ref}
	}
	found, err := g.lsRemote(ctx, remote, candidates)
	if err != nil {
		return Head{}, err
	}
	switch len(found) {
	case 0:
		return Head{}, &ciconfig.IncludeError{Message: fmt.Sprintf("ref %.100q is neither a branch nor a tag of the project's repository %s",
			ref, gitremote.Redact(remote))}
	case 1:
	default:
		return Head{}, &ciconfig.IncludeError{Message: fmt.Sprintf("ref %.100q is ambiguous: the project's repository has a branch and a tag of that name; "+
			"say refs/heads/%s or refs/tags/%s", ref, ref, ref)}
	}
	h := Head{Ref: found[0]}
	err = g.at(ctx, remote, h.Ref, func(ctx context.Context, r *repo, object string) error {
		out, err := r.git(ctx, "", "rev-parse", "--verify", "--end-of-options", object+"^{commit}")
		if err != nil {
			return fmt.Errorf("include cache: rev-parse %s: %w", h.Ref, err)
		}
		h.SHA = strings.TrimSpace(string(out))
		return nil
	})
	if err != nil {
		return Head{}, err
	}
	return h, nil
}

// lsRemote returns which of refs (full names) remote has, in the order given. The remote
// reaches git through its environment, never its arguments or a message, as in fetch; git
// runs with a directory of its own (GIT_DIR) so that no repository the server happens to
// run in lends it configuration.
func (g *GitCache) lsRemote(ctx context.Context, remote string, refs []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	args := append([]string{"ls-remote", "--end-of-options", "origin"}, refs...)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = append(gitEnv(remote), "GIT_DIR="+os.DevNull)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		cause := err
		if ctx.Err() != nil {
			cause = ctx.Err()
		} else if stderr.Len() > 0 {
			cause = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) && ctx.Err() == nil {
			return nil, fmt.Errorf("git ls-remote: %w", err) // git itself could not run: the server's
		}
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("the project's repository %s could not be read: %v",
			gitremote.Redact(remote), redact(cause, remote)), Transient: true}
	}
	have := map[string]bool{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if _, name, ok := strings.Cut(line, "\t"); ok {
			have[name] = true
		}
	}
	var found []string
	for _, ref := range refs {
		if have[ref] {
			found = append(found, ref)
		}
	}
	return found, nil
}
