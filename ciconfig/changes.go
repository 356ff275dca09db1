package ciconfig

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jobapi/jobapi/ciconfig/expr"
)

// Repository answers rules:changes, only/except:changes, rules:exists and the cache keys
// computed from files from the project's repository at the pipeline's commit. The server's (package cisource) reads it
// with git; tests give their own. Errors the user can act on (the repository cannot be
// fetched) are *IncludeError; ErrRevisionNotFound when a commit or ref does not exist.
type Repository interface {
	// Paths lists every file at the pipeline's commit, in git's (sorted) order.
	Paths() ([]string, error)
	// Changed lists the files that differ between the commit base (a full sha) and the
	// pipeline's commit, renames as a deletion and an addition; at most MaxChangedPaths+1.
	Changed(base string) ([]string, error)
	// MergeBase returns the best common ancestor of rev (a branch or tag name, refs/...,
	// or a sha) and the pipeline's commit.
	MergeBase(rev string) (string, error)
	// BlobIDs returns the git object id of each file of paths at the pipeline's commit,
	// in their order: "" for a path that names no file there (nothing, a directory).
	// cache:key:files.
	BlobIDs(paths []string) ([]string, error)
	// LastCommit returns the latest commit at or before the pipeline's commit that
	// changed path (a file or a directory, taken literally), "" when none did.
	// cache:key:files_commits.
	LastCommit(path string) (string, error)
}

// ErrRevisionNotFound is what a Repository answers for a commit or ref it does not have.
var ErrRevisionNotFound = errors.New("revision not found")

// GitLab's limits: at most 50 paths in a changes or exists clause; after 50,000 pattern
// comparisons (changed or existing files × patterns) the clause is assumed to hold. The
// list of changed files is read up to one past that: more files than comparisons allowed
// makes every clause hold anyway.
const (
	maxClausePaths     = 50
	maxGlobComparisons = 50_000
	MaxChangedPaths    = maxGlobComparisons
)

// changesClause is rules:changes (a list, or {paths, compare_to}) or only/except:changes.
type changesClause struct {
	paths     []string
	compareTo string // "" compares with the pushed base (before_sha)
	// policy: only/except:changes, which GitLab neither expands nor caps.
	policy bool
}

// existsClause is rules:exists (a list, or {paths}).
type existsClause struct {
	paths []string
}

var (
	changesUnsupported = map[string]string{}
	existsUnsupported  = map[string]string{
		"project": " (files of another project)",
		"ref":     " (needs exists:project)",
		"regexp":  "",
	}
)

func parseChanges(v *val, job, key string) (*changesClause, error) {
	c := &changesClause{}
	var pathsVal *val
	switch v.kind {
	case vSeq:
		pathsVal = v
	case vMap:
		if err := checkKeys(v, job, key, []string{"paths", "compare_to"}, changesUnsupported); err != nil {
			return nil, err
		}
		pathsVal = v.get("paths")
		if pathsVal == nil || pathsVal.kind == vNull {
			return nil, errAt(v, job, key, "paths can't be blank")
		}
		if x := v.get("compare_to"); x != nil && x.kind != vNull {
			s, err := stringValue(x, job, key+":compare_to")
			if err != nil {
				return nil, err
			}
			if s == "" {
				return nil, errAt(x, job, key+":compare_to", "config can't be blank")
			}
			c.compareTo = s
		}
	default:
		return nil, errAt(v, job, key, "config should be an array of strings or a hash")
	}
	var err error
	if c.paths, err = stringList(pathsVal, job, key+pathsSuffix(v)); err != nil {
		return nil, err
	}
	if len(c.paths) > maxClausePaths {
		return nil, errAt(pathsVal, job, key+pathsSuffix(v), "has too many entries (maximum %d)", maxClausePaths)
	}
	return c, nil
}

func parseExists(v *val, job, key string) (*existsClause, error) {
	pathsVal := v
	if v.kind == vMap {
		if err := checkKeys(v, job, key, []string{"paths"}, existsUnsupported); err != nil {
			return nil, err
		}
		if pathsVal = v.get("paths"); pathsVal == nil || pathsVal.kind == vNull {
			return nil, errAt(v, job, key, "paths can't be blank")
		}
	}
	paths, err := stringList(pathsVal, job, key+pathsSuffix(v))
	if err != nil {
		return nil, err
	}
	if len(paths) > maxClausePaths {
		return nil, errAt(pathsVal, job, key+pathsSuffix(v), "has too many entries (maximum %d)", maxClausePaths)
	}
	return &existsClause{paths: paths}, nil
}

func pathsSuffix(v *val) string {
	if v.kind == vMap {
		return ":paths"
	}
	return ""
}

// repoFacts evaluates changes and exists clauses for one pipeline, reading the repository
// once for each thing it needs.
type repoFacts struct {
	c        Context
	vars     map[string]string // the Context's variables
	paths    []string
	hasPaths bool
	changed  map[string][]string // by base sha
	bases    map[string]string   // compare_to → merge base
	warnings []string
	// blobs and lastCommits: what cache keys read, by path ("" for no file, no commit).
	blobs       map[string]string
	lastCommits map[string]string
}

func newRepoFacts(c Context, vars map[string]string) *repoFacts {
	return &repoFacts{c: c, vars: vars, changed: map[string][]string{}, bases: map[string]string{},
		blobs: map[string]string{}, lastCommits: map[string]string{}}
}

var fullSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

const zeroSHA = "0000000000000000000000000000000000000000"

// pushBase is the commit a pipeline's changes are computed from without compare_to, as
// GitLab's Pipeline#modified_paths: a branch pipeline whose before_sha and sha are real
// commits (Gitlab::Git::Push#branch_updated?) compares before_sha with sha; every other
// pipeline (a new branch, a tag, API, web, schedule and trigger pipelines, which have no
// before_sha) has no base, and its changes clauses hold. "" means no base.
func (f *repoFacts) pushBase() string {
	if f.c.RefIsTag || !fullSHA.MatchString(f.c.BeforeSHA) || f.c.BeforeSHA == zeroSHA ||
		!fullSHA.MatchString(f.c.SHA) || f.c.SHA == zeroSHA {
		return ""
	}
	return f.c.BeforeSHA
}

// changesHold answers a changes clause; vars expands its paths and compare_to (GitLab's
// ExpandVariables.expand_existing: an undefined variable stays as written).
func (f *repoFacts) changesHold(cl *changesClause, vars expr.Lookup, job, key string, line int) (bool, error) {
	fail := func(format string, args ...any) error {
		return &Error{Line: line, Job: job, Key: key, Message: fmt.Sprintf(format, args...)}
	}
	compareTo := cl.compareTo
	switch f.c.Source {
	case "merge_request_event", "external_pull_request_event":
		// GitLab compares a merge request pipeline's files with its target branch (the
		// request's diff, from their merge base); compare_to, when given, wins.
		target, _ := vars("CI_MERGE_REQUEST_TARGET_BRANCH_NAME")
		switch {
		case compareTo != "":
		case target == "":
			return false, fail("jobapi has no merge requests to compare a %s pipeline's files with: it has no CI_MERGE_REQUEST_TARGET_BRANCH_NAME", f.c.Source)
		default:
			compareTo = "refs/heads/" + target
		}
	}
	var base string
	if compareTo != "" {
		rev := expandExisting(compareTo, vars)
		if b, ok := f.bases[rev]; ok {
			base = b
		} else {
			repo, err := f.repo(fail)
			if err != nil {
				return false, err
			}
			b, err := repo.MergeBase(rev)
			if errors.Is(err, ErrRevisionNotFound) {
				return false, fail("compare_to is not a valid ref: %q", rev)
			}
			if err := f.repoError(err, fail); err != nil {
				return false, err
			}
			f.bases[rev], base = b, b
		}
	} else if base = f.pushBase(); base == "" {
		return true, nil
	}
	changed, ok := f.changed[base]
	if !ok {
		repo, err := f.repo(fail)
		if err != nil {
			return false, err
		}
		changed, err = repo.Changed(base)
		if errors.Is(err, ErrRevisionNotFound) {
			if compareTo == "" {
				return false, fail("before_sha %s is not a commit of the project's repository", base)
			}
			return false, fail("the merge base %s of compare_to is not in the project's repository", base)
		}
		if err := f.repoError(err, fail); err != nil {
			return false, err
		}
		f.changed[base] = changed
	}
	if len(changed) == 0 {
		return false, nil
	}
	globs := cl.paths
	if !cl.policy {
		globs = make([]string, 0, len(cl.paths))
		seen := map[string]bool{}
		for _, p := range cl.paths {
			p = expandExisting(p, vars)
			if !seen[p] {
				seen[p] = true
				globs = append(globs, p)
			}
		}
	}
	if len(globs) == 0 {
		return false, nil
	}
	if n := len(changed) * len(globs); (!cl.policy && n > maxGlobComparisons) || len(changed) > MaxChangedPaths {
		f.warnings = append(f.warnings, fmt.Sprintf("%s: more than %d files changed or %d comparisons; the clause holds, as GitLab assumes a match past its limit",
			where(job, key), MaxChangedPaths, maxGlobComparisons))
		return true, nil
	}
	res, err := compileGlobs(globs, fail)
	if err != nil {
		return false, err
	}
	for _, p := range changed {
		for _, re := range res {
			if re.MatchString(p) {
				return true, nil
			}
		}
	}
	return false, nil
}

// existsHolds answers rules:exists as GitLab's Clause::Exists: exact paths (a trailing /
// names a directory), **/*.ext globs and other patterns; past 50,000 pattern comparisons
// the clause holds.
func (f *repoFacts) existsHolds(cl *existsClause, vars expr.Lookup, job, key string, line int) (bool, error) {
	fail := func(format string, args ...any) error {
		return &Error{Line: line, Job: job, Key: key, Message: fmt.Sprintf(format, args...)}
	}
	if len(cl.paths) == 0 {
		return false, nil
	}
	if !f.hasPaths {
		repo, err := f.repo(fail)
		if err != nil {
			return false, err
		}
		paths, err := repo.Paths()
		if err := f.repoError(err, fail); err != nil {
			return false, err
		}
		f.paths, f.hasPaths = paths, true
	}
	globs := make([]string, len(cl.paths))
	topLevelOnly := true
	for i, p := range cl.paths {
		globs[i] = expandExisting(p, vars)
		topLevelOnly = topLevelOnly && !strings.Contains(globs[i], "/") && !strings.Contains(globs[i], "**")
	}
	paths := f.paths
	if topLevelOnly { // GitLab reads only the top-level files then, which the limit counts
		paths = make([]string, 0, len(f.paths))
		for _, p := range f.paths {
			if !strings.Contains(p, "/") {
				paths = append(paths, p)
			}
		}
	}
	var patterns []string
	for _, g := range globs {
		switch {
		case !strings.ContainsAny(g, "*?[{"): // exact: a file, or a directory/
			for _, p := range paths {
				if p == g || (strings.HasSuffix(g, "/") && strings.HasPrefix(p, g)) {
					return true, nil
				}
			}
		case isExtensionGlob(g):
			ext := strings.TrimPrefix(g, "**/*")
			for _, p := range paths {
				if strings.HasSuffix(p, ext) {
					return true, nil
				}
			}
		default:
			patterns = append(patterns, g)
		}
	}
	if len(patterns) == 0 {
		return false, nil
	}
	if len(paths)*len(patterns) > maxGlobComparisons {
		f.warnings = append(f.warnings, fmt.Sprintf("%s: %d files × %d patterns is more than %d comparisons; the clause holds, as GitLab assumes a match past its limit",
			where(job, key), len(paths), len(patterns), maxGlobComparisons))
		return true, nil
	}
	res, err := compileGlobs(patterns, fail)
	if err != nil {
		return false, err
	}
	for _, re := range res {
		for _, p := range paths {
			if re.MatchString(p) {
				return true, nil
			}
		}
	}
	return false, nil
}

// isExtensionGlob: **/*.js and the like, matched as a suffix (GitLab's extension_glob?).
func isExtensionGlob(g string) bool {
	ext, ok := strings.CutPrefix(g, "**/*")
	return ok && strings.HasPrefix(ext, ".") && !strings.Contains(ext, "/") && !strings.ContainsAny(ext, "*?[{")
}

func compileGlobs(globs []string, fail func(string, ...any) error) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, len(globs))
	for i, g := range globs {
		re, err := globRegexp(g)
		if err != nil {
			return nil, fail("%q is not a valid glob: %v", g, err)
		}
		out[i] = re
	}
	return out, nil
}

func (f *repoFacts) repo(fail func(string, ...any) error) (Repository, error) {
	if f.c.Repository == nil {
		return nil, fail("cannot be answered: the pipeline has no repository to read (the project's repo_url)")
	}
	return f.c.Repository, nil
}

// repoError turns what the Repository answered into the user's 400 when it is theirs to
// fix, the server's error otherwise.
func (f *repoFacts) repoError(err error, fail func(string, ...any) error) error {
	var ie *IncludeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ie):
		err := fail("cannot be answered: %s", ie.Message)
		var e *Error
		if errors.As(err, &e) {
			e.Transient = ie.Transient
		}
		return err
	case errors.Is(err, ErrRevisionNotFound):
		return fail("cannot be answered: the pipeline's commit is not in the project's repository")
	}
	return fmt.Errorf("read the repository: %w", err)
}

func where(job, key string) string {
	if job != "" {
		return "jobs:" + job + ":" + key
	}
	return key
}

// expandExisting replaces $NAME, ${NAME} and %NAME% that are defined with their values and
// keeps the others as written (GitLab's ExpandVariables.expand_existing).
func expandExisting(s string, vars expr.Lookup) string {
	if !strings.ContainsAny(s, "$%") {
		return s
	}
	return tagVariable.ReplaceAllStringFunc(s, func(m string) string {
		sub := tagVariable.FindStringSubmatch(m)
		if v, ok := vars(sub[1] + sub[2] + sub[3]); ok {
			return v
		}
		return m
	})
}
