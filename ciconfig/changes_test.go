package ciconfig

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// repo is a Repository over fixed answers: the input of these tests, as cisource reads it
// from git (cisource's own tests and the e2e test use real repositories).
type repo struct {
	files   []string
	changed map[string][]string // by base
	bases   map[string]string   // compare_to → merge base
	blobs   map[string]string   // path → blob id (cache:key:files)
	commits map[string]string   // path → its last commit (cache:key:files_commits)
	err     error               // answered by every method when set
	calls   []string
}

func (r *repo) BlobIDs(paths []string) ([]string, error) {
	r.calls = append(r.calls, "blobs "+strings.Join(paths, ","))
	if r.err != nil {
		return nil, r.err
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = r.blobs[p]
	}
	return out, nil
}

func (r *repo) LastCommit(path string) (string, error) {
	r.calls = append(r.calls, "last-commit "+path)
	if r.err != nil {
		return "", r.err
	}
	return r.commits[path], nil
}

func (r *repo) Paths() ([]string, error) {
	r.calls = append(r.calls, "paths")
	if r.err != nil {
		return nil, r.err
	}
	return r.files, nil
}

func (r *repo) Changed(base string) ([]string, error) {
	r.calls = append(r.calls, "changed "+base)
	if r.err != nil {
		return nil, r.err
	}
	c, ok := r.changed[base]
	if !ok {
		return nil, ErrRevisionNotFound
	}
	return c, nil
}

func (r *repo) MergeBase(rev string) (string, error) {
	r.calls = append(r.calls, "merge-base "+rev)
	if r.err != nil {
		return "", r.err
	}
	b, ok := r.bases[rev]
	if !ok {
		return "", ErrRevisionNotFound
	}
	return b, nil
}

var (
	shaA = strings.Repeat("a", 40)
	shaB = strings.Repeat("b", 40)
	shaM = strings.Repeat("c", 40)
)

// pushed is a push of shaA onto a branch whose tip was shaB.
func pushed(r *repo) Context {
	return Context{Ref: "feature", DefaultBranch: "main", Source: "push", SHA: shaA, BeforeSHA: shaB, Repository: r}
}

const monorepoRules = `
variables: {SERVICES_DIR: services}
api:
  script: make api
  rules:
    - changes: [$SERVICES_DIR/api/**/*, "go.{mod,sum}"]
web:
  script: make web
  rules:
    - changes:
        paths: ["${SERVICES_DIR}/web/**/*", "*.json"]
docs:
  script: make docs
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      changes: [docs/**/*]
    - changes: [$UNDEFINED/docs/*]
`

func TestRulesChangesWithPushBase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		changed []string
		want    []string
	}{
		{[]string{"services/api/cmd/main.go"}, []string{"api"}},
		{[]string{"go.sum"}, []string{"api"}},
		{[]string{"services/web/.eslintrc"}, []string{"web"}},                // FNM_DOTMATCH: * matches a leading dot
		{[]string{"package.json", "services/web/src/a.ts"}, []string{"web"}}, // *.json: the top level only
		{[]string{"$UNDEFINED/docs/a.md"}, []string{"docs"}},                 // an undefined variable stays as written
		{[]string{"docs/a.md", "lib/package.json"}, nil},                     // not main; *.json does not cross a /
	} {
		r := &repo{changed: map[string][]string{shaB: tc.changed}}
		res, err := Compile([]byte(monorepoRules), pushed(r))
		if tc.want == nil {
			if !errors.Is(err, ErrNoJobs) {
				t.Errorf("%v: %v, want ErrNoJobs", tc.changed, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.changed, err)
		}
		if got := names(res); !slices.Equal(got, tc.want) {
			t.Errorf("changed %v: jobs %v, want %v", tc.changed, got, tc.want)
		}
		// The diff is read once for the whole pipeline.
		if n := strings.Count(strings.Join(r.calls, ","), "changed"); n != 1 {
			t.Errorf("changed %v: the diff was read %d times: %v", tc.changed, n, r.calls)
		}
	}
}

// Without a comparable base GitLab's changes clauses hold: a new branch (zero before_sha),
// a tag, and every pipeline that is not a push (API, web, schedule, trigger). The
// repository is not read.
func TestRulesChangesWithoutBaseHold(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Context{
		"new branch":    {Ref: "feature", Source: "push", SHA: shaA, BeforeSHA: zeroSHA},
		"tag":           {Ref: "v1.0", RefIsTag: true, Source: "push", SHA: shaA, BeforeSHA: shaB},
		"api":           {Ref: "main", Source: "api", SHA: shaA},
		"schedule":      {Ref: "main", Source: "schedule", SHA: shaA},
		"trigger":       {Ref: "main", Source: "trigger", SHA: shaA},
		"web":           {Ref: "main", Source: "web", SHA: shaA},
		"no sha":        {Ref: "main", Source: "push", BeforeSHA: shaB},
		"no before_sha": {Ref: "main", Source: "push", SHA: shaA},
	} {
		r := &repo{}
		c.Repository = r
		res, err := Compile([]byte(monorepoRules), c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := names(res); !slices.Equal(got, []string{"api", "web", "docs"}) {
			t.Errorf("%s: jobs %v, want every job", name, got)
		}
		if len(r.calls) != 0 {
			t.Errorf("%s: the repository was read: %v", name, r.calls)
		}
	}
	// jobapi has no merge requests: a caller's merge request source is refused, not guessed.
	c := Context{Ref: "feature", Source: "merge_request_event", SHA: shaA, BeforeSHA: shaB, Repository: &repo{}}
	if _, err := Compile([]byte(monorepoRules), c); err == nil || !strings.Contains(err.Error(), "jobapi has no merge requests") {
		t.Errorf("merge request pipeline: %v", err)
	}
}

func TestRulesChangesCompareTo(t *testing.T) {
	t.Parallel()
	src := `
variables: {BASE: main}
build:
  script: make
  rules:
    - changes:
        paths: [src/**/*]
        compare_to: refs/heads/$BASE
`
	// A tag pipeline has no push base, but compare_to gives one.
	r := &repo{bases: map[string]string{"refs/heads/main": shaM}, changed: map[string][]string{shaM: {"src/a/b.c"}}}
	c := Context{Ref: "v1", RefIsTag: true, Source: "push", SHA: shaA, Repository: r}
	if got := names(mustCompile(t, src, c)); !slices.Equal(got, []string{"build"}) {
		t.Errorf("jobs %v", got)
	}
	if !slices.Equal(r.calls, []string{"merge-base refs/heads/main", "changed " + shaM}) {
		t.Errorf("calls %v", r.calls)
	}
	r.changed[shaM] = []string{"README.md"}
	if _, err := Compile([]byte(src), c); !errors.Is(err, ErrNoJobs) {
		t.Errorf("nothing under src changed: %v", err)
	}
	r.changed[shaM] = nil // the branch is the base: nothing changed
	if _, err := Compile([]byte(src), c); !errors.Is(err, ErrNoJobs) {
		t.Errorf("empty diff: %v", err)
	}
	// A ref that does not exist is the user's mistake: GitLab's "is not a valid ref".
	c.Repository = &repo{}
	_, err := Compile([]byte(src), c)
	if want := `jobs:build:rules:rule:changes compare_to is not a valid ref: "refs/heads/main" (line 6)`; err == nil || err.Error() != want {
		t.Errorf("unknown compare_to:\n got %v\nwant %s", err, want)
	}
}

func TestRulesChangesRepositoryFaults(t *testing.T) {
	t.Parallel()
	src := "job: {script: x, rules: [{changes: [a]}]}\n"
	// The pushed base is not in the repository (a force push of a history the server
	// never had, a mistyped before_sha): a 400 naming it, never a guess.
	_, err := Compile([]byte(src), pushed(&repo{}))
	if want := "jobs:job:rules:rule:changes before_sha " + shaB + " is not a commit of the project's repository (line 1)"; err == nil || err.Error() != want {
		t.Errorf("unknown base:\n got %v\nwant %s", err, want)
	}
	// The repository cannot be fetched: the user's 400, with cisource's reason.
	_, err = Compile([]byte(src), pushed(&repo{err: &IncludeError{Message: "the project's repository could not be fetched"}}))
	if want := "jobs:job:rules:rule:changes cannot be answered: the project's repository could not be fetched (line 1)"; err == nil || err.Error() != want {
		t.Errorf("unreachable:\n got %v\nwant %s", err, want)
	}
	// Anything else is the server's: not an *Error (a 500), and not true either.
	_, err = Compile([]byte(src), pushed(&repo{err: errors.New("disk full")}))
	var e *Error
	if err == nil || errors.As(err, &e) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("server fault: %v", err)
	}
	// No repository at all.
	c := pushed(nil)
	c.Repository = nil
	if _, err := Compile([]byte(src), c); err == nil || !strings.Contains(err.Error(), "no repository to read") {
		t.Errorf("no repository: %v", err)
	}
}

// Past GitLab's 50,000 comparisons the clause holds; the pipeline says so in a warning.
func TestRulesChangesComparisonLimit(t *testing.T) {
	t.Parallel()
	var many []string
	for i := range 1001 {
		many = append(many, fmt.Sprintf("gen/%d.txt", i))
	}
	globs := make([]string, 50)
	for i := range globs {
		globs[i] = fmt.Sprintf("dir%d/*", i)
	}
	src := fmt.Sprintf("job: {script: x, rules: [{changes: [%s]}]}\n", strings.Join(globs, ", "))
	res := mustCompile(t, src, pushed(&repo{changed: map[string][]string{shaB: many}}))
	if len(res.Jobs) != 1 || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "jobs:job:rules:rule:changes: more than") {
		t.Errorf("1001 files × 50 globs: jobs %v, warnings %q", names(res), res.Warnings)
	}
	// 1,000 files × 50 globs is within the limit: matched for real.
	if _, err := Compile([]byte(src), pushed(&repo{changed: map[string][]string{shaB: many[:1000]}})); !errors.Is(err, ErrNoJobs) {
		t.Errorf("1000 files × 50 globs: %v", err)
	}
}

func TestOnlyExceptChanges(t *testing.T) {
	t.Parallel()
	src := `
api:
  script: make api
  only:
    changes: [api/**/*]
docs-check:
  script: make lint
  except:
    changes: ["**/*.md"]
release:
  script: make release
  only:
    refs: [main]
    changes: [api/**/*]
`
	cases := []struct {
		name string
		c    Context
		want []string
	}{
		{"api changed on a branch", pushed(&repo{changed: map[string][]string{shaB: {"api/x.go"}}}), []string{"api", "docs-check"}},
		{"only docs changed", pushed(&repo{changed: map[string][]string{shaB: {"docs/x/a.md"}}}), nil},
		// No base: only:changes holds (the job runs), except:changes holds (the job does not).
		{"new branch", Context{Ref: "main", Source: "push", SHA: shaA, BeforeSHA: zeroSHA}, []string{"api", "release"}},
		// only given as a hash without refs takes GitLab's default refs: a tag matches them.
		{"tag", Context{Ref: "v1", RefIsTag: true, Source: "push", SHA: shaA}, []string{"api"}},
	}
	for _, tc := range cases {
		res, err := Compile([]byte(src), tc.c)
		if tc.want == nil {
			if !errors.Is(err, ErrNoJobs) {
				t.Errorf("%s: %v, want no jobs", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := names(res); !slices.Equal(got, tc.want) {
			t.Errorf("%s: jobs %v, want %v", tc.name, got, tc.want)
		}
	}
	// refs are answered first: a pipeline on another branch never reads the repository.
	r := &repo{}
	c := pushed(r)
	if _, err := Compile([]byte("release: {script: x, only: {refs: [main], changes: [a]}}\n"), c); !errors.Is(err, ErrNoJobs) || len(r.calls) != 0 {
		t.Errorf("refs not matching: %v, calls %v", err, r.calls)
	}
}

func TestRulesExists(t *testing.T) {
	t.Parallel()
	files := []string{".env.example", "Dockerfile", "deploy/helm/Chart.yaml", "package.json", "services/api/Dockerfile", "web/src/app.ts"}
	for _, tc := range []struct {
		exists string
		want   bool
	}{
		{"[Dockerfile]", true},
		{"[Makefile]", false},
		{"[deploy/]", true},    // a directory: its path with a trailing slash
		{"[deploy]", false},    // without it, a file of that name
		{"['**/*.ts']", true},  // an extension glob, at any depth
		{"['**/*.go']", false}, //
		{"['*/api/Dockerfile']", true},
		{"['*.{yaml,json}']", true}, // top level: package.json
		{"['*.yaml']", false},       // FNM_PATHNAME: * never crosses a /
		{"['*.example']", true},     // FNM_DOTMATCH
		{"['**/Chart.yaml']", true}, //
		{"[$DIR/Dockerfile]", true}, // job variable DIR=services/api
		{"{paths: ['$NOPE/x']}", false},
	} {
		src := fmt.Sprintf("job: {script: x, variables: {DIR: services/api}, rules: [{exists: %s}]}\n", tc.exists)
		r := &repo{files: files}
		_, err := Compile([]byte(src), Context{Ref: "main", Source: "api", Repository: r})
		if got := err == nil; got != tc.want || (err != nil && !errors.Is(err, ErrNoJobs)) {
			t.Errorf("exists %s: err %v, want holds=%v", tc.exists, err, tc.want)
		}
	}
	// The file list is read once for every exists clause of the pipeline.
	r := &repo{files: files}
	mustCompile(t, "a: {script: x, rules: [{exists: [Dockerfile]}]}\nb: {script: x, rules: [{exists: [x]}, {exists: [y]}]}\nc: {script: x}\n",
		Context{Ref: "main", Repository: r})
	if !slices.Equal(r.calls, []string{"paths"}) {
		t.Errorf("calls %v", r.calls)
	}
}

// Past 50,000 pattern comparisons exists holds, as GitLab's; when every glob is of the top
// level, only the top-level files count.
func TestRulesExistsComparisonLimit(t *testing.T) {
	t.Parallel()
	var files []string
	for i := range 25_001 {
		files = append(files, fmt.Sprintf("src/f%d.c", i))
	}
	files = append(files, "top.txt")
	res := mustCompile(t, "job: {script: x, rules: [{exists: ['lib/*.h', 'include/*.h']}]}\n", Context{Ref: "main", Repository: &repo{files: files}})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "25002 files × 2 patterns") {
		t.Errorf("warnings %q", res.Warnings)
	}
	// Top-level globs: one file to compare, no limit, no match.
	if _, err := Compile([]byte("job: {script: x, rules: [{exists: ['*.h', '*.hpp']}]}\n"), Context{Ref: "main", Repository: &repo{files: files}}); !errors.Is(err, ErrNoJobs) {
		t.Errorf("top-level globs: %v", err)
	}
}

func TestWorkflowAndIncludeRulesReadTheRepository(t *testing.T) {
	t.Parallel()
	r := &repo{files: []string{"Dockerfile", "ci/docker.yml"}, changed: map[string][]string{shaB: {"docs/a.md"}}}
	f := &files{local: map[string]string{"ci/docker.yml": "docker: {script: docker build .}\n", "ci/node.yml": "node: {script: npm test}\n"}}
	src := `
workflow:
  rules:
    - changes: [docs/**/*]
      variables: {DOCS_ONLY: "true"}
    - when: always
include:
  - local: ci/docker.yml
    rules: [{exists: [Dockerfile]}]
  - local: ci/node.yml
    rules: [{exists: [package.json]}]
lint: {script: make lint}
`
	c := pushed(r)
	c.Includes = f
	res := mustCompile(t, src, c)
	if got := names(res); !slices.Equal(got, []string{"docker", "lint"}) {
		t.Errorf("jobs %v", got)
	}
	if v := jobVar(job(t, res, "lint"), "DOCS_ONLY"); v != "true" {
		t.Errorf("DOCS_ONLY %q: workflow:rules:changes did not hold", v)
	}
}

func TestGlobSemantics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"**/*.md", "a.md", true},
		{"**/*.md", "x/y/a.md", true},
		{"docs/**", "docs/a.md", true}, // ** not before / is *
		{"docs/**", "docs/x/a.md", false},
		{"src/*", "src/.hidden", true},
		{"[!a]*", "b/c", false}, // a class never matches /
		{`\*.txt`, "*.txt", true},
		{`\*.txt`, "a.txt", false},
		{"{api,web}/**/*", "web/src/x.ts", true},
		{"{api,web}/**/*", "cli/x.go", false},
	} {
		re, err := globRegexp(tc.glob)
		if err != nil {
			t.Fatalf("%s: %v", tc.glob, err)
		}
		if got := re.MatchString(tc.path); got != tc.want {
			t.Errorf("%s ~ %s = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
	}
}

func jobVar(j builds.JobDefinition, key string) string {
	for _, v := range j.Variables {
		if v.Key == key {
			return v.Value
		}
	}
	return ""
}

// A merge request pipeline's changes are the request's: from the merge base of its target
// branch (CI_MERGE_REQUEST_TARGET_BRANCH_NAME) to its commit, as GitLab compares them.
func TestRulesChangesMergeRequestTarget(t *testing.T) {
	t.Parallel()
	r := &repo{bases: map[string]string{"refs/heads/main": shaM}, changed: map[string][]string{shaM: {"services/web/app.ts"}}}
	c := Context{Ref: "feature", Source: "merge_request_event", SHA: shaA, BeforeSHA: zeroSHA, Repository: r,
		Variables: []builds.Variable{{Key: "CI_MERGE_REQUEST_TARGET_BRANCH_NAME", Value: "main"}}}
	if got := names(mustCompile(t, monorepoRules, c)); !slices.Equal(got, []string{"web"}) {
		t.Errorf("jobs %v, want web only", got)
	}
	if !slices.Equal(r.calls, []string{"merge-base refs/heads/main", "changed " + shaM}) {
		t.Errorf("calls %v: want one merge base with main and one diff", r.calls)
	}
}
