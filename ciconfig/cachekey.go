package ciconfig

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// maxCacheKeyFiles is GitLab's limit of paths or patterns in cache:key:files and
// files_commits (Entry::Files' DEFAULT_MAX_SIZE).
const maxCacheKeyFiles = 2

// cacheKeySpec is a cache key computed from the repository at the pipeline's commit, as
// GitLab's Seed::Build::Cache does:
//
//   - key:files: the SHA-1 of the git blob ids of the named files (wildcards expanded),
//     sorted, deduplicated and joined with "-": the key follows the files' content, so
//     branches with the same lock file share a cache;
//   - key:files_commits: the same of the id of each file's latest commit, so the key
//     changes with every commit that touches them, even one that leaves them as they were;
//   - prefix: put before it with "-"; without one, the cache's index in the job's list
//     ("0", "1"…). Files that do not exist are left out; none left gives "default".
type cacheKeySpec struct {
	paths   []string // files or files_commits, leading slashes dropped, blanks and repeats left out
	commits bool     // files_commits
	prefix  string
	// hasPrefix: prefix given (even empty, which GitLab keeps: the key is the digest alone).
	hasPrefix bool
	job, key  string // where the key is, for errors
	line      int
}

// parseCacheKeyFiles reads cache:key as a hash: files or files_commits (one of them, up to
// two paths or patterns), and prefix.
func parseCacheKeyFiles(v *val, job, key string) (*cacheKeySpec, error) {
	if err := checkKeys(v, job, key, []string{"files", "files_commits", "prefix"}, nil); err != nil {
		return nil, err
	}
	files, commits := v.get("files"), v.get("files_commits")
	if files != nil && commits != nil {
		return nil, errAt(v, job, key, "config cannot use files and files_commits together")
	}
	s := &cacheKeySpec{job: job, key: key, line: v.line}
	list, name := files, "files"
	if commits != nil {
		list, name, s.commits = commits, "files_commits", true
	}
	if list == nil || list.kind == vNull {
		return nil, errAt(v, job, key, "config missing required keys: files")
	}
	paths, err := stringList(list, job, key+":"+name)
	if err != nil {
		return nil, err
	}
	switch {
	case len(paths) < 1:
		return nil, errAt(list, job, key+":"+name, "config requires at least 1 item")
	case len(paths) > maxCacheKeyFiles:
		return nil, errAt(list, job, key+":"+name, "config has too many items (maximum is %d)", maxCacheKeyFiles)
	}
	for _, p := range paths {
		// Entry::Files drops leading slashes; Seed::Build::Cache drops blank entries and
		// repeats.
		p = strings.TrimLeft(p, "/")
		if strings.TrimSpace(p) != "" && !slices.Contains(s.paths, p) {
			s.paths = append(s.paths, p)
		}
	}
	if x := v.get("prefix"); x != nil && x.kind != vNull {
		switch x.kind {
		case vString, vInt, vFloat:
			s.prefix, s.hasPrefix = x.text, true
		default:
			return nil, errAt(x, job, key+":prefix", "config should be a string or symbol")
		}
		if err := checkCacheKey(s.prefix); err != "" {
			return nil, errAt(x, job, key+":prefix", "config %s", err)
		}
	}
	return s, nil
}

// cacheKeySpecs reads, for each cache of a job (v is its cache:, a hash or a list of
// them, already checked by parseCaches), the key to compute (nil for a key given as text).
func cacheKeySpecs(v *val, job, key string) ([]*cacheKeySpec, error) {
	items := []*val{v}
	if v.kind == vSeq {
		items = v.vals
	}
	var out []*cacheKeySpec
	computed := false
	for _, item := range items {
		var s *cacheKeySpec
		if k := item.get("key"); k != nil && k.kind == vMap {
			var err error
			if s, err = parseCacheKeyFiles(k, job, key+":key"); err != nil {
				return nil, err
			}
			computed = true
		}
		out = append(out, s)
	}
	if !computed {
		return nil, nil
	}
	return out, nil
}

// cacheKey computes the key of the index-th cache of a job from the repository at the
// pipeline's commit. Lookups are shared by every job of the pipeline (default: cache).
func (f *repoFacts) cacheKey(s *cacheKeySpec, index int) (string, error) {
	fail := func(format string, args ...any) error {
		return &Error{Line: s.line, Job: s.job, Key: s.key, Message: fmt.Sprintf(format, args...)}
	}
	repo, err := f.repo(fail)
	if err != nil {
		return "", err
	}
	var ids []string
	if s.commits {
		// GitLab asks for each path's last commit as written: no wildcard expansion.
		for _, p := range s.paths {
			id, ok := f.lastCommits[p]
			if !ok {
				if id, err = repo.LastCommit(p); err != nil {
					return "", f.repoError(err, fail)
				}
				f.lastCommits[p] = id
			}
			if id != "" {
				ids = append(ids, id)
			}
		}
	} else {
		paths, err := f.expandWildcards(s.paths, fail)
		if err != nil {
			return "", err
		}
		var missing []string
		for _, p := range paths {
			if _, ok := f.blobs[p]; !ok {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			found, err := repo.BlobIDs(missing)
			if err != nil {
				return "", f.repoError(err, fail)
			}
			for i, p := range missing {
				f.blobs[p] = found[i]
			}
		}
		for _, p := range paths {
			if id := f.blobs[p]; id != "" {
				ids = append(ids, id)
			}
		}
	}
	digest := "default"
	if len(ids) > 0 {
		slices.Sort(ids)
		ids = slices.Compact(ids)
		sum := sha1.Sum([]byte(strings.Join(ids, "-")))
		digest = hex.EncodeToString(sum[:])
	}
	prefix := s.prefix
	if !s.hasPrefix {
		prefix = strconv.Itoa(index)
	}
	if prefix == "" {
		return digest, nil
	}
	return prefix + "-" + digest, nil
}

// expandWildcards replaces each pattern with a * by the files it matches at the pipeline's
// commit (GitLab's search_files_by_wildcard_path); other paths stay as written.
func (f *repoFacts) expandWildcards(patterns []string, fail func(string, ...any) error) ([]string, error) {
	var out []string
	for _, p := range patterns {
		if !strings.Contains(p, "*") {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
			continue
		}
		if !f.hasPaths {
			repo, err := f.repo(fail)
			if err != nil {
				return nil, err
			}
			if f.paths, err = repo.Paths(); err != nil {
				return nil, f.repoError(err, fail)
			}
			f.hasPaths = true
		}
		re := wildcardPathRegexp(p)
		for _, file := range f.paths {
			if re.MatchString(file) && !slices.Contains(out, file) {
				out = append(out, file)
			}
		}
	}
	return out, nil
}

// wildcardPathRegexp is GitLab's Repository#search_files_by_wildcard_path: the path
// escaped, then ** matching anything (slashes too) and * anything but a slash; ? and [ are
// themselves. Unlike include:local's globs, "**/" needs a slash: **/package.json does not
// match a package.json at the root.
func wildcardPathRegexp(pattern string) *regexp.Regexp {
	s := regexp.QuoteMeta(pattern)
	s = strings.ReplaceAll(s, `\*\*`, `.*?`)
	s = strings.ReplaceAll(s, `\*`, `(?:[^/])*?`)
	return regexp.MustCompile("^" + s + "$")
}
