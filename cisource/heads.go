package cisource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/jobapi/jobapi/gitref"
	"github.com/jobapi/jobapi/gitremote"
)

// maxHeads bounds the branches and tags read from one remote by ListHeads.
const maxHeads = 20_000

// ListHeads lists the branches and tags of remote with git ls-remote, each with its commit
// (an annotated tag's peeled to it), in git's order: what a poll compares with the heads it
// saw before. Other refs (pull requests, notes) and names git would not accept as a ref
// are left out. The remote reaches git through its environment, never its arguments or a
// message, as in fetch.
func ListHeads(ctx context.Context, remote string) ([]Head, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "ls-remote", "--end-of-options", "origin")
	// A directory of its own, so that no repository the server runs in lends git its
	// configuration.
	cmd.Env = append(gitEnv(remote), "GIT_DIR="+os.DevNull)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case errors.As(err, &ee):
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		default:
			return nil, fmt.Errorf("git ls-remote: %w", err) // git itself could not run
		}
		return nil, fmt.Errorf("the project's repository %s could not be read: %s", gitremote.Redact(remote), redact(err, remote))
	}
	var heads []Head
	at := map[string]int{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		sha, ref, ok := strings.Cut(line, "\t")
		if !ok || !fullSHA.MatchString(sha) {
			continue
		}
		peeled := strings.HasSuffix(ref, "^{}")
		ref = strings.TrimSuffix(ref, "^{}")
		if !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") || gitref.CheckName("ref", ref) != nil {
			continue
		}
		if i, ok := at[ref]; ok {
			if peeled {
				heads[i].SHA = sha // the tag's commit, not the tag object
			}
			continue
		}
		if len(heads) == maxHeads {
			return nil, fmt.Errorf("the project's repository %s has more than %d branches and tags", gitremote.Redact(remote), maxHeads)
		}
		at[ref] = len(heads)
		heads = append(heads, Head{Ref: ref, SHA: sha})
	}
	return heads, nil
}
