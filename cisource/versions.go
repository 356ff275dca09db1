package cisource

import (
	"bytes"
	"context"
	"fmt"
	"strings"
)

// blobBatch bounds the paths given to one git ls-tree: a wildcard of cache:key:files can
// match many files, and a command line has a limit.
const blobBatch = 500

// BlobIDs returns the git object id of each of paths at rev of the repository at remote,
// in their order: "" where the commit has no file there (nothing, or a directory). Paths
// are taken literally and must name a file exactly: "./a" or "a/" name none, as in GitLab's
// blobs_at. cache:key:files.
func (g *GitCache) BlobIDs(ctx context.Context, remote, rev string, paths []string) ([]string, error) {
	out := make([]string, len(paths))
	var asked []int // indexes of the paths worth asking git about
	for i, p := range paths {
		if p != "" && !strings.HasPrefix(p, "./") && !strings.HasPrefix(p, "/") && !strings.HasSuffix(p, "/") {
			asked = append(asked, i)
		}
	}
	if len(asked) == 0 {
		return out, nil
	}
	err := g.at(ctx, remote, rev, func(ctx context.Context, r *repo, object string) error {
		for start := 0; start < len(asked); start += blobBatch {
			batch := asked[start:min(start+blobBatch, len(asked))]
			args := []string{"--literal-pathspecs", "ls-tree", "-z", "--full-tree", "--end-of-options", object, "--"}
			for _, i := range batch {
				args = append(args, paths[i])
			}
			b, err := r.git(ctx, "", args...)
			if err != nil {
				return fmt.Errorf("git ls-tree: %w", err)
			}
			found := map[string]string{}
			// Entries: "<mode> <type> <id>\t<path>\x00".
			for _, entry := range bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0}) {
				meta, path, ok := bytes.Cut(entry, []byte{'\t'})
				fields := strings.Fields(string(meta))
				if ok && len(fields) == 3 && fields[1] == "blob" {
					found[string(path)] = fields[2]
				}
			}
			for _, i := range batch {
				out[i] = found[paths[i]]
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LastCommit returns the latest commit at or before rev that changed path (a file or a
// directory, taken literally), "" when none did: git log over the commit's whole history,
// which is fetched (a shallow cache is deepened). cache:key:files_commits.
func (g *GitCache) LastCommit(ctx context.Context, remote, rev, path string) (string, error) {
	if err := notAnOption("path", path); err != nil {
		return "", err
	}
	var out string
	err := g.at(ctx, remote, rev, func(ctx context.Context, r *repo, object string) error {
		head, err := r.git(ctx, "", "rev-parse", "--verify", "--end-of-options", object+"^{commit}")
		if err != nil {
			return fmt.Errorf("resolve %s: %w", rev, err)
		}
		sha := strings.TrimSpace(string(head))
		if shallow, err := r.git(ctx, "", "rev-parse", "--is-shallow-repository"); err == nil && strings.TrimSpace(string(shallow)) == "true" {
			if err := r.fetchRevs(ctx, remote, true, sha); err != nil {
				return err
			}
		}
		b, err := r.git(ctx, "", "--literal-pathspecs", "log", "-1", "--format=%H", "--end-of-options", sha, "--", path)
		if err != nil {
			return fmt.Errorf("git log: %w", err)
		}
		out = strings.TrimSpace(string(b))
		return nil
	})
	return out, err
}
