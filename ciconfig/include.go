package ciconfig

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	"github.com/jobapi/jobapi/ciconfig/expr"
)

// Includes reads the files `include:` names. ciconfig stays pure: the server gives, per
// request, an implementation that reads the project's repository at the pipeline's commit
// and fetches remote files (package cisource); tests give their own files.
type Includes interface {
	// Local returns the file at path (relative to the repository's root, no leading
	// slash) at the pipeline's commit; ErrIncludeNotFound when it does not exist.
	Local(path string) ([]byte, error)
	// Remote returns the body of an https URL.
	Remote(url string) ([]byte, error)
	// LocalPaths lists every file of the repository at the pipeline's commit, for local
	// includes with wildcards.
	LocalPaths() ([]string, error)
}

// ErrIncludeNotFound is what an Includes answers for a file that does not exist.
var ErrIncludeNotFound = errors.New("file not found")

// IncludeError is an Includes failure the user can act on (a remote answering 404, a
// file too large); its message is shown in the 400. Transient says the source could not
// be reached now (a repository whose fetch failed), which a later try may get past. Other
// errors are the server's (a 500 in Compile's caller).
type IncludeError struct {
	Message   string
	Transient bool
}

// ArtifactFiles reads the files of a child pipeline's include: artifact, out of the
// artifacts archives of its parent pipeline's jobs (package downstream).
type ArtifactFiles interface {
	// Artifact returns the file at path in the archive of job's latest successful attempt;
	// an *IncludeError for what the user can fix (no such job, no archive, no such file,
	// too large), another error when the archive cannot be read now.
	Artifact(job, path string) ([]byte, error)
}

func (e *IncludeError) Error() string { return e.Message }

// GitLab's limits on include: at most 150 files in all (max_includes, its default), and
// nesting at most 100 levels deep.
const (
	MaxIncludes     = 150
	maxIncludeDepth = 100
)

var includeUnsupported = map[string]string{
	"project":   " (files of another project)",
	"template":  " (GitLab's templates)",
	"component": " (CI/CD components)",
	"inputs":    " (spec:inputs)",
	"integrity": " (the SHA-256 of a remote include)",
}

// includer expands `include:` of the file and of the files it includes.
type includer struct {
	files     Includes
	artifacts ArtifactFiles // nil: not a child pipeline, include: artifact is refused
	repo      *repoFacts    // what include:rules:exists and changes read
	vars      expr.Lookup   // what include:rules see
	spent     *budget       // the bytes and nodes of every file read, the including one's too
	seen      map[string]bool
	count     int
	// included lists the files merged in, in the order they were read (lint's includes).
	included []IncludedFile
}

// IncludedFile is one file include: merged in, as GitLab's lint lists it.
type IncludedFile struct {
	Type     string `json:"type"` // local, remote or artifact
	Location string `json:"location"`
	// Job: the job whose artifacts an artifact include reads ("" otherwise).
	Job string `json:"job,omitempty"`
}

// resolveIncludes returns the tree with its includes merged in, GitLab's way
// (External::Processor): the included files deep-merged in order, a later one over an
// earlier one, then the including file over them all; `include` itself removed.
func resolveIncludes(tree *val, spent *budget, files Includes, artifacts ArtifactFiles, repo *repoFacts, vars expr.Lookup) (*val, []IncludedFile, error) {
	if tree.get("include") == nil {
		return tree, nil, nil
	}
	x := &includer{files: files, artifacts: artifacts, repo: repo, vars: vars, spent: spent, seen: map[string]bool{}}
	out, err := x.expand(tree, 1)
	return out, x.included, err
}

func (x *includer) expand(tree *val, depth int) (*val, error) {
	inc := tree.get("include")
	if inc == nil || inc.kind == vNull {
		return withoutKey(tree, "include"), nil
	}
	if depth > maxIncludeDepth {
		return nil, errAt(inc, "", "include", "nested more than %d levels deep", maxIncludeDepth)
	}
	var items []*val
	switch inc.kind {
	case vString, vMap:
		items = []*val{inc}
	case vSeq:
		items = inc.vals
	default:
		return nil, errAt(inc, "", "include", "config should be a hash, a string or an array containing hashes and strings")
	}
	var merged *val
	for _, item := range items {
		kind, loc, job, err := x.location(item)
		if err != nil {
			return nil, err
		}
		if kind == "" { // left out by its rules
			continue
		}
		locs := []string{loc}
		if kind == "local" && strings.ContainsAny(loc, "*?[{") {
			if locs, err = x.glob(item, loc); err != nil {
				return nil, err
			}
		}
		for _, loc := range locs {
			key := kind + ":" + job + ":" + loc
			if x.seen[key] { // a file included twice (a diamond) is merged once
				continue
			}
			x.seen[key] = true
			if x.count++; x.count > MaxIncludes {
				return nil, errAt(item, "", "include", "Maximum of %d nested includes are allowed!", MaxIncludes)
			}
			sub, err := x.read(item, kind, loc, job)
			if err != nil {
				return nil, err
			}
			x.included = append(x.included, IncludedFile{Type: kind, Location: loc, Job: job})
			if sub, err = x.expand(sub, depth+1); err != nil {
				return nil, err
			}
			merged = deepMerge(merged, sub)
		}
	}
	own := withoutKey(tree, "include")
	if merged == nil {
		return own, nil
	}
	return deepMerge(merged, own), nil
}

// location reads one entry: a string (a URL is remote, anything else local) or a hash
// with local, remote or artifact (with its job) and optional rules. kind "" means its
// rules leave it out.
func (x *includer) location(item *val) (kind, loc, job string, err error) {
	if item.kind == vString {
		if strings.HasPrefix(item.text, "https://") || strings.HasPrefix(item.text, "http://") {
			return "remote", item.text, "", nil
		}
		return "local", strings.TrimPrefix(item.text, "/"), "", nil
	}
	if item.kind != vMap {
		return "", "", "", errAt(item, "", "include", "config should be a hash or a string")
	}
	if err := checkKeys(item, "", "include", []string{"local", "remote", "artifact", "job", "rules", "file"}, includeUnsupported); err != nil {
		return "", "", "", err
	}
	if item.has("file") {
		return "", "", "", errAt(item.get("file"), "", "include:file", "needs include:project, which is not supported by jobapi yet (files of another project)")
	}
	n := 0
	for _, k := range []string{"local", "remote", "artifact"} {
		if item.has(k) {
			kind = k
			n++
		}
	}
	if n != 1 {
		return "", "", "", errAt(item, "", "include", "config should have exactly one of local, remote, artifact")
	}
	if loc, err = stringValue(item.get(kind), "", "include:"+kind); err != nil {
		return "", "", "", err
	}
	switch kind {
	case "local":
		loc = strings.TrimPrefix(loc, "/")
	case "artifact":
		// GitLab's External::File::Artifact: only a child pipeline's configuration reads
		// its parent's artifacts, and it names the job.
		if x.artifacts == nil {
			return "", "", "", errAt(item, "", "include:artifact", "Including configs from artifacts is only allowed when triggering child pipelines")
		}
		j := item.get("job")
		if j == nil || j.kind != vString || j.text == "" {
			return "", "", "", errAt(item, "", "include:artifact", "Job must be provided when including configs from artifacts")
		}
		job = j.text
	}
	if kind != "artifact" && item.has("job") {
		return "", "", "", errAt(item.get("job"), "", "include", "config contains unknown keys: job")
	}
	if r := item.get("rules"); r != nil && r.kind != vNull {
		ok, err := x.rulesAllow(r)
		if err != nil || !ok {
			return "", "", "", err
		}
	}
	return kind, loc, job, nil
}

// rulesAllow applies include:rules: the first rule whose if holds decides (when: never
// leaves the file out); no rule holding leaves it out, as in GitLab.
func (x *includer) rulesAllow(v *val) (bool, error) {
	if v.kind != vSeq {
		return false, errAt(v, "", "include:rules", "config should be an array of hashes")
	}
	for _, item := range v.vals {
		if item.kind != vMap {
			return false, errAt(item, "", "include:rules", "config should be an array of hashes")
		}
		if err := checkKeys(item, "", "include:rules:rule", []string{"if", "exists", "changes", "when"}, nil); err != nil {
			return false, err
		}
		var cl clauses
		if c := item.get("if"); c != nil && c.kind != vNull {
			text, err := stringValue(c, "", "include:rules:rule:if")
			if err != nil {
				return false, err
			}
			if cl.cond, err = expr.Parse(text); err != nil {
				return false, errAt(c, "", "include:rules:rule", "if invalid expression syntax (%s)", strings.TrimPrefix(err.Error(), "invalid expression syntax: "))
			}
		}
		var err error
		if c := item.get("changes"); c != nil && c.kind != vNull {
			if cl.changes, err = parseChanges(c, "", "include:rules:rule:changes"); err != nil {
				return false, err
			}
		}
		if c := item.get("exists"); c != nil && c.kind != vNull {
			if cl.exists, err = parseExists(c, "", "include:rules:rule:exists"); err != nil {
				return false, err
			}
		}
		held, err := x.repo.holds(&cl, x.vars, "", "include:rules:rule", item.line)
		if err != nil {
			return false, err
		}
		if !held {
			continue
		}
		w := item.get("when")
		if w == nil || w.kind == vNull {
			return true, nil
		}
		switch w.text {
		case "never":
			return false, nil
		case "always":
			return true, nil
		}
		return false, errAt(w, "", "include:rules:rule", "when unknown value: %s (one of: never, always)", w.text)
	}
	return false, nil
}

// read fetches and parses one included file.
func (x *includer) read(item *val, kind, loc, job string) (*val, error) {
	if x.files == nil && kind != "artifact" {
		return nil, errAt(item, "", "include:"+kind, "%s cannot be read: the pipeline has no repository or file source", loc)
	}
	var src []byte
	var err error
	switch kind {
	case "local":
		p := loc
		if p == "" {
			return nil, errAt(item, "", "include:local", "config can't be blank")
		}
		if clean := path.Clean(p); clean != p || strings.HasPrefix(clean, "../") || clean == ".." {
			return nil, errAt(item, "", "include:local", "%q is not a path inside the repository", loc)
		}
		if !strings.HasSuffix(p, ".yml") && !strings.HasSuffix(p, ".yaml") {
			return nil, errAt(item, "", "include:local", "Included file `%s` does not have YAML extension!", loc)
		}
		src, err = x.files.Local(p)
		if errors.Is(err, ErrIncludeNotFound) {
			return nil, errAt(item, "", "include:local", "Local file `%s` does not exist!", loc)
		}
	case "remote":
		u, perr := url.Parse(loc)
		if perr != nil || u.Scheme != "https" || u.Host == "" {
			return nil, errAt(item, "", "include:remote", "%q: remote includes must be https URLs", loc)
		}
		if !strings.HasSuffix(u.Path, ".yml") && !strings.HasSuffix(u.Path, ".yaml") {
			return nil, errAt(item, "", "include:remote", "Included file `%s` does not have YAML extension!", loc)
		}
		src, err = x.files.Remote(loc)
	case "artifact":
		if !strings.HasSuffix(loc, ".yml") && !strings.HasSuffix(loc, ".yaml") {
			return nil, errAt(item, "", "include:artifact", "Included file `%s` does not have YAML extension!", loc)
		}
		src, err = x.artifacts.Artifact(job, loc)
	}
	var ie *IncludeError
	switch {
	case errors.As(err, &ie):
		e := errAt(item, "", "include:"+kind, "`%s`: %s", loc, ie.Message)
		e.Transient = ie.Transient
		return nil, e
	case err != nil:
		return nil, fmt.Errorf("include %s %s: %w", kind, loc, err)
	}
	// The budget is spent file by file as each is read, before it is parsed or merged:
	// past it, the files not read yet are never fetched.
	sub, err := parseYAML(src, x.spent)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, &Error{Line: e.Line, Key: "include:" + kind, Message: fmt.Sprintf("`%s`: %s", loc, e.Message)}
		}
		return nil, err
	}
	if sub.kind != vMap {
		return nil, errAt(item, "", "include:"+kind, "`%s`: Invalid configuration format", loc)
	}
	return sub, nil
}

// glob lists the repository's files a local wildcard path matches, in the repository's
// (git's) order, as GitLab's search_files_by_wildcard_path with File.fnmatch (FNM_PATHNAME,
// FNM_DOTMATCH, FNM_EXTGLOB): * and ? stay within a directory, **/ spans any number of
// them, [...] and {a,b} as in a shell.
func (x *includer) glob(item *val, pattern string) ([]string, error) {
	if x.files == nil {
		return nil, errAt(item, "", "include:local", "%s cannot be read: the pipeline has no repository or file source", pattern)
	}
	re, err := globRegexp(pattern)
	if err != nil {
		return nil, errAt(item, "", "include:local", "%q is not a valid wildcard path: %v", pattern, err)
	}
	all, err := x.files.LocalPaths()
	var ie *IncludeError
	switch {
	case errors.As(err, &ie):
		e := errAt(item, "", "include:local", "`%s`: %s", pattern, ie.Message)
		e.Transient = ie.Transient
		return nil, e
	case err != nil:
		return nil, fmt.Errorf("include local %s: %w", pattern, err)
	}
	var out []string
	for _, p := range all {
		if re.MatchString(p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errAt(item, "", "include:local", "Local file `%s` does not exist!", pattern)
	}
	return out, nil
}

// globRegexp turns an fnmatch pattern (FNM_PATHNAME | FNM_DOTMATCH | FNM_EXTGLOB) into an
// anchored regexp.
func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	braces := 0
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*' && strings.HasPrefix(pattern[i:], "**/"):
			b.WriteString("(?:[^/]*/)*")
			i += 2
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := strings.IndexByte(pattern[i+1:], ']')
			if end < 0 {
				return nil, errors.New("[ without ]")
			}
			class := pattern[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") || strings.HasPrefix(class, "^") {
				class = "^/" + class[1:] // FNM_PATHNAME: no class matches a slash
			}
			b.WriteString("[" + class + "]")
			i += end + 1
		case c == '\\' && i+1 < len(pattern): // an escaped character is itself
			i++
			b.WriteString(regexp.QuoteMeta(string(pattern[i])))
		case c == '{':
			braces++
			b.WriteString("(?:")
		case c == '}' && braces > 0:
			braces--
			b.WriteString(")")
		case c == ',' && braces > 0:
			b.WriteString("|")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	if braces > 0 {
		return nil, errors.New("{ without }")
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

func withoutKey(m *val, key string) *val {
	if m.get(key) == nil {
		return m
	}
	out := newMap(m.line)
	for i, k := range m.keys {
		if k != key {
			out.set(k, m.vals[i])
		}
	}
	return out
}
