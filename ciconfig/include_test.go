package ciconfig

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// files is an Includes over fixed texts: the input of these tests, as a repository would
// give it.
type files struct {
	local, remote map[string]string
	reads         []string
}

func (f *files) Local(p string) ([]byte, error) {
	f.reads = append(f.reads, p)
	s, ok := f.local[p]
	if !ok {
		return nil, ErrIncludeNotFound
	}
	return []byte(s), nil
}

func (f *files) LocalPaths() ([]string, error) {
	var out []string
	for p := range f.local {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

func (f *files) Remote(u string) ([]byte, error) {
	f.reads = append(f.reads, u)
	s, ok := f.remote[u]
	if !ok {
		return nil, &IncludeError{Message: "answered 404"}
	}
	return []byte(s), nil
}

func TestIncludeMergeOrder(t *testing.T) {
	t.Parallel()
	f := &files{local: map[string]string{
		"ci/base.yml": `
variables: {A: base, B: base}
.go: {image: "golang:1.22", tags: [docker]}
build: {stage: build, script: make base, extends: .go}
`,
		"ci/override.yml": `
include: ci/base.yml       # nested, and also included by the main file: merged once
variables: {B: override}
build: {script: make override}
`,
	}, remote: map[string]string{
		"https://example.com/ci/lint.yml": "lint: {stage: test, script: golangci-lint run}\n",
	}}
	src := `
include:
  - local: /ci/base.yml
  - ci/override.yml
  - remote: https://example.com/ci/lint.yml
  - local: ci/never.yml
    rules:
      - if: $CI_COMMIT_BRANCH == "release"
variables: {C: main}
build: {variables: {OWN: "1"}}
`
	c := mainPush
	c.Includes = f
	res := mustCompile(t, src, c)
	if got := names(res); !slices.Equal(got, []string{"build", "lint"}) {
		t.Fatalf("jobs %v", got)
	}
	b := job(t, res, "build")
	// Later includes over earlier ones, the including file over all; hashes merged deep,
	// so build keeps stage and extends from base, script from override, variables its own.
	if !slices.Equal(b.Script, []string{"make override"}) || b.Stage != "build" || b.Image.Name != "golang:1.22" {
		t.Errorf("build %+v", b)
	}
	vars := map[string]string{}
	for _, v := range b.Variables {
		vars[v.Key] = v.Value
	}
	if vars["A"] != "base" || vars["B"] != "override" || vars["C"] != "main" || vars["OWN"] != "1" {
		t.Errorf("build variables %v", vars)
	}
	if slices.Contains(f.reads, "ci/never.yml") {
		t.Error("an include whose rules do not hold was read")
	}
	if n := strings.Count(strings.Join(f.reads, " "), "ci/base.yml"); n != 1 {
		t.Errorf("ci/base.yml read %d times, want once", n)
	}
	if strings.Contains(res.MergedYAML, "include") {
		t.Errorf("merged YAML keeps include:\n%s", res.MergedYAML)
	}
}

func TestIncludeErrors(t *testing.T) {
	t.Parallel()
	f := &files{local: map[string]string{
		"bad.yml":    "job: {script: [",
		"list.yml":   "- a\n",
		"loop-a.yml": "include: loop-b.yml\na: {script: x}\n",
		"loop-b.yml": "include: loop-a.yml\nb: {script: x}\n",
	}}
	for src, want := range map[string]string{
		"include: missing.yml\n":                               "include:local Local file `missing.yml` does not exist! (line 1)",
		"include: ci/file.txt\n":                               "include:local Included file `ci/file.txt` does not have YAML extension! (line 1)",
		"include: ../up.yml\n":                                 `include:local "../up.yml" is not a path inside the repository (line 1)`,
		"include: 'ci/*.yml'\n":                                "include:local Local file `ci/*.yml` does not exist! (line 1)",
		"include: 'ci/[a.yml'\n":                               `include:local "ci/[a.yml" is not a valid wildcard path: [ without ] (line 1)`,
		"include: {remote: 'http://example.com/a.yml'}\n":      `include:remote "http://example.com/a.yml": remote includes must be https URLs (line 1)`,
		"include: {remote: 'https://example.com/a.yml'}\n":     "include:remote `https://example.com/a.yml`: answered 404 (line 1)",
		"include: bad.yml\n":                                   "include:local `bad.yml`: Invalid configuration format: did not find expected node content (line 2)",
		"include: list.yml\n":                                  "include:local `list.yml`: Invalid configuration format (line 1)",
		"include: {local: a.yml, remote: 'https://x/a.yml'}\n": "include config should have exactly one of local, remote, artifact (line 1)",
		"include: [{local: a.yml, rules: [{exists: [x]}]}]\n":  "include:rules:rule:exists cannot be answered: the pipeline has no repository to read (the project's repo_url) (line 1)",
		"include: 1\n":                                         "include config should be a hash, a string or an array containing hashes and strings (line 1)",
	} {
		c := mainPush
		c.Includes = f
		_, err := Compile([]byte(src+"job: {script: x}\n"), c)
		if err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", src, err, want)
		}
	}
	// A loop is cut by the include-once rule, not refused: both files are merged once
	// (b under a, so b's job comes first, as Ruby's deep_merge orders keys).
	c := mainPush
	c.Includes = f
	if got := names(mustCompile(t, "include: loop-a.yml\n", c)); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("include loop: jobs %v, want [b a]", got)
	}
}

// TestIncludeLimits: GitLab's 150 files in all, and 100 levels of nesting.
func TestIncludeLimits(t *testing.T) {
	t.Parallel()
	f := &files{local: map[string]string{}}
	var list strings.Builder
	list.WriteString("include:\n")
	for i := range MaxIncludes + 1 {
		f.local[fmt.Sprintf("f%d.yml", i)] = fmt.Sprintf("job%d: {script: x}\n", i)
		fmt.Fprintf(&list, "  - f%d.yml\n", i)
	}
	c := mainPush
	c.Includes = f
	_, err := Compile([]byte(list.String()), c)
	if err == nil || err.Error() != "include Maximum of 150 nested includes are allowed! (line 152)" {
		t.Errorf("151 files: %v", err)
	}
	all := list.String()
	if res := mustCompile(t, all[:strings.LastIndex(all, "  - ")], c); len(res.Jobs) != MaxIncludes {
		t.Errorf("150 files: %d jobs, want %d", len(res.Jobs), MaxIncludes)
	}

	chain := &files{local: map[string]string{}}
	for i := range maxIncludeDepth + 1 {
		chain.local[fmt.Sprintf("c%d.yml", i)] = fmt.Sprintf("include: c%d.yml\njob%d: {script: x}\n", i+1, i)
	}
	chain.local[fmt.Sprintf("c%d.yml", maxIncludeDepth-1)] = "last: {script: x}\n"
	c.Includes = chain
	if res := mustCompile(t, "include: c0.yml\n", c); len(res.Jobs) != maxIncludeDepth {
		t.Errorf("100 levels: %d jobs, want %d", len(res.Jobs), maxIncludeDepth)
	}
	chain.local[fmt.Sprintf("c%d.yml", maxIncludeDepth-1)] = fmt.Sprintf("include: c%d.yml\njob: {script: x}\n", maxIncludeDepth)
	if _, err := Compile([]byte("include: c0.yml\n"), c); err == nil || err.Error() != "include nested more than 100 levels deep (line 1)" {
		t.Errorf("101 levels: %v", err)
	}
}

func TestGlobRegexp(t *testing.T) {
	t.Parallel()
	paths := []string{"a.yml", "ci/a.yml", "ci/b.yaml", "ci/.hidden.yml", "ci/x/c.yml", "ci/x/y/d.yml", "docs/e.yml"}
	for pattern, want := range map[string][]string{
		"ci/*.yml":        {"ci/a.yml", "ci/.hidden.yml"},
		"ci/**/*.yml":     {"ci/a.yml", "ci/.hidden.yml", "ci/x/c.yml", "ci/x/y/d.yml"},
		"**/*.yml":        {"a.yml", "ci/a.yml", "ci/.hidden.yml", "ci/x/c.yml", "ci/x/y/d.yml", "docs/e.yml"},
		"ci/*.{yml,yaml}": {"ci/a.yml", "ci/b.yaml", "ci/.hidden.yml"},
		"ci/[ab].y?ml":    {"ci/b.yaml"},
		"ci/[!b].yml":     {"ci/a.yml"},
		"*.yml":           {"a.yml"},
		"ci/x/*/d.yml":    {"ci/x/y/d.yml"},
		"docs/e.yml":      {"docs/e.yml"},
		"ci/a+b(c).yml":   nil,
	} {
		re, err := globRegexp(pattern)
		if err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		var got []string
		for _, p := range paths {
			if re.MatchString(p) {
				got = append(got, p)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s matches %v, want %v", pattern, got, want)
		}
	}
}

// TestIncludeWildcard: a local wildcard includes every file it matches, in the
// repository's order, each once.
func TestIncludeWildcard(t *testing.T) {
	t.Parallel()
	f := &files{local: map[string]string{
		"ci/jobs/a.yml":      "a: {script: a}\n",
		"ci/jobs/b.yml":      "b: {script: b}\nvariables: {V: b}\n",
		"ci/jobs/deep/c.yml": "c: {script: c}\n",
		"ci/other.txt":       "not yaml",
	}}
	c := mainPush
	c.Includes = f
	res := mustCompile(t, "include:\n  - local: ci/jobs/*.yml\n  - ci/jobs/**/*.yml\n", c)
	if got := names(res); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("jobs %v, want [a b c]", got)
	}
	if _, err := Compile([]byte("include: 'ci/*'\n"), c); err == nil || !strings.Contains(err.Error(), "Included file `ci/other.txt` does not have YAML extension!") {
		t.Errorf("a wildcard matching a text file: %v", err)
	}
}

// bulkFile is a 1 MiB include: a hidden key holding a list of 262,000 short values (dense),
// or one string of 1 MiB (sparse).
func bulkFile(i int, dense bool) string {
	head := fmt.Sprintf(".bulk-%d: ", i)
	if dense {
		return head + "[" + strings.Repeat("abc,", (MaxConfigBytes-len(head)-4)/4) + "x]\n"
	}
	return head + strings.Repeat("a", MaxConfigBytes-len(head)-1) + "\n"
}

// Thirty 1 MiB includes share one budget with the including file, spent as each is read:
// their values are refused at the file that takes the configuration past MaxNodes, their
// bytes at the one past MaxTotalBytes, with a 400 naming the limit and the file, and the files
// after it are never read.
func TestIncludeBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		dense     bool
		want      string
		wantReads int
	}{
		{"values", true, "include:local `ci/bulk-1.yml`: the configuration expands to more than 500000 values", 2},
		{"bytes", false, "include:local `ci/bulk-7.yml`: the configuration and its includes are more than 8388608 bytes (8 MiB) in all", 8},
	} {
		f := &files{local: map[string]string{}}
		var src strings.Builder
		src.WriteString("include:\n")
		for i := range 30 {
			name := fmt.Sprintf("ci/bulk-%d.yml", i)
			f.local[name] = bulkFile(i, tc.dense)
			fmt.Fprintf(&src, "  - local: %s\n", name)
		}
		src.WriteString("job: {script: x}\n")
		_, err := Compile([]byte(src.String()), Context{Source: "push", Ref: "main", Includes: f})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
		if len(f.reads) != tc.wantReads {
			t.Errorf("%s: %d files read, want %d (none after the one past the budget)", tc.name, len(f.reads), tc.wantReads)
		}
	}
	// Under the budget, files of both kinds are merged.
	f := &files{local: map[string]string{"ci/dense.yml": bulkFile(0, true), "ci/sparse.yml": bulkFile(1, false)}}
	res, err := Compile([]byte("include: [ci/dense.yml, ci/sparse.yml]\njob: {script: x}\n"), Context{Source: "push", Ref: "main", Includes: f})
	if err != nil || len(res.Jobs) != 1 {
		t.Errorf("a 1 MiB include of each kind: %v", err)
	}
}
