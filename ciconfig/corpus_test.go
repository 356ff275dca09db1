package ciconfig

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

var update = flag.Bool("update", false, "rewrite testdata/ci/*.golden.json from what Compile gives (review every change by hand)")

const corpusDir = "../testdata/ci"

// golden is NAME.golden.json beside NAME.yml: the pipelines the file gives, one per
// context. Contexts are written by hand; -update rewrites the results.
type golden struct {
	Cases []goldenCase `json:"cases"`
}

type goldenCase struct {
	Name    string  `json:"name"`
	Context Context `json:"context"`
	// Repository: what the project's repository answers in this case (rules:changes,
	// only/except:changes, rules:exists); none given, the pipeline has no repository.
	Repository *corpusRepo `json:"repository,omitempty"`
	Error      string      `json:"error,omitempty"`
	Stages     []string    `json:"stages,omitempty"`
	Jobs       []graphJob  `json:"jobs,omitempty"`
	Warns      []string    `json:"warnings,omitempty"`
	// AutoCancel: workflow:auto_cancel as the pipeline gets it (absent: GitLab's defaults).
	AutoCancel *builds.AutoCancel `json:"auto_cancel,omitempty"`
}

// graphJob is the part of a job definition the corpus pins: the graph and what defaults,
// extends and rules decide.
type graphJob struct {
	Name          string              `json:"name"`
	Stage         string              `json:"stage"`
	When          string              `json:"when"`
	StartIn       int                 `json:"start_in,omitempty"`
	AllowFailure  bool                `json:"allow_failure,omitempty"`
	ExitCodes     []int               `json:"allow_failure_exit_codes,omitempty"`
	Needs         []builds.Need       `json:"needs,omitempty"`
	NeedsDeclared bool                `json:"needs_declared,omitempty"`
	Dependencies  []string            `json:"dependencies"`
	Node          string              `json:"node,omitempty"`
	Image         string              `json:"image,omitempty"`
	Services      []string            `json:"services,omitempty"`
	Tags          []string            `json:"tags,omitempty"`
	Timeout       int                 `json:"timeout,omitempty"`
	Retry         *builds.RetryRule   `json:"retry,omitempty"`
	BeforeScript  []string            `json:"before_script,omitempty"`
	Script        []string            `json:"script"`
	AfterScript   []string            `json:"after_script,omitempty"`
	Variables     map[string]string   `json:"variables,omitempty"`
	Artifacts     []builds.Artifacts  `json:"artifacts,omitempty"`
	Cache         []builds.Cache      `json:"cache,omitempty"`
	Coverage      string              `json:"coverage_regex,omitempty"`
	Interruptible bool                `json:"interruptible,omitempty"`
	Environment   *builds.Environment `json:"environment,omitempty"`
	ResourceGroup string              `json:"resource_group,omitempty"`
	Trigger       *builds.Trigger     `json:"trigger,omitempty"`
	IDTokens      []builds.IDToken    `json:"id_tokens,omitempty"`
}

func graphOf(j builds.JobDefinition) graphJob {
	g := graphJob{Name: j.Name, Stage: j.Stage, When: j.When, StartIn: j.StartInSeconds,
		AllowFailure: j.AllowFailure, ExitCodes: j.AllowFailureExitCodes, Needs: j.Needs,
		NeedsDeclared: j.NeedsDeclared, Dependencies: j.Dependencies, Image: j.Image.Name, Tags: j.Tags,
		Timeout: j.TimeoutSeconds, BeforeScript: j.BeforeScript, Script: j.Script, AfterScript: j.AfterScript,
		Artifacts: j.Artifacts, Cache: j.Cache, Coverage: j.CoverageRegex, Interruptible: j.Interruptible, Environment: j.Environment,
		ResourceGroup: j.ResourceGroup,
		Trigger:       j.Trigger, IDTokens: j.IDTokens}
	if g.Dependencies == nil {
		g.Dependencies = []string{}
	}
	if j.NodeTotal > 0 {
		g.Node = strings.Join([]string{itoa(j.NodeIndex), itoa(j.NodeTotal)}, "/")
	}
	for _, s := range j.Services {
		g.Services = append(g.Services, s.Name)
	}
	if j.Retry.Max > 0 || len(j.Retry.When) > 0 || len(j.Retry.ExitCodes) > 0 {
		r := j.Retry
		g.Retry = &r
	}
	if len(j.Variables) > 0 {
		g.Variables = map[string]string{}
		for _, v := range j.Variables {
			g.Variables[v.Key] = v.Value
		}
	}
	return g
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestCorpus compiles every testdata/ci/*.yml for each context of its golden file and
// checks the pipeline against it, and that the lead's Normalize accepts every pipeline.
func TestCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yml")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			goldenPath := strings.TrimSuffix(file, ".yml") + ".golden.json"
			var want golden
			raw, err := os.ReadFile(goldenPath)
			switch {
			case err == nil:
				if err := json.Unmarshal(raw, &want); err != nil {
					t.Fatalf("%s: %v", goldenPath, err)
				}
			case *update && errors.Is(err, os.ErrNotExist):
				want.Cases = []goldenCase{{Name: "push to main", Context: Context{Ref: "main", DefaultBranch: "main", Source: "push",
					SHA: strings.Repeat("a", 40)}}}
			default:
				t.Fatalf("%s: %v (run go test ./ciconfig -run TestCorpus -update, then review it)", goldenPath, err)
			}
			got := golden{}
			for _, c := range want.Cases {
				gc := goldenCase{Name: c.Name, Context: c.Context, Repository: c.Repository}
				c.Context.Includes = corpusFiles{}
				if c.Repository != nil {
					c.Context.Repository = c.Repository
				}
				res, err := Compile(src, c.Context)
				if err != nil {
					gc.Error = err.Error()
				} else {
					gc.Stages = res.Stages
					gc.Warns = res.Warnings
					if res.AutoCancel != (builds.AutoCancel{}) {
						gc.AutoCancel = &res.AutoCancel
					}
					for _, j := range res.Jobs {
						gc.Jobs = append(gc.Jobs, graphOf(j))
					}
					def := builds.PipelineDefinition{ProjectID: 1, Ref: c.Context.Ref, SHA: c.Context.SHA, Stages: res.Stages, Jobs: res.Jobs,
						AutoCancel: res.AutoCancel}
					if err := def.Normalize(); err != nil {
						t.Errorf("%s: builds.Normalize refuses the pipeline: %v", c.Name, err)
					}
				}
				got.Cases = append(got.Cases, gc)
			}
			out, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, '\n')
			if *update {
				if err := os.WriteFile(goldenPath, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !bytes.Equal(out, raw) {
				t.Errorf("%s differs from what Compile gives now; diff:\n%s\n(run with -update after checking the change by hand)",
					goldenPath, lineDiff(string(raw), string(out)))
			}
		})
	}
}

// corpusRepo is a case's repository: its files at the pipeline's commit, the files the
// push changed (before_sha..sha, whatever the base), and the refs compare_to may name (their
// merge base with the pipeline's commit changed the same files).
type corpusRepo struct {
	Files []string `json:"files,omitempty"`
	Diff  []string `json:"changed"`
	Refs  []string `json:"refs,omitempty"`
	// Blobs and Commits: the files' blob ids and last commits, for cache:key:files and
	// files_commits (a path not listed has none).
	Blobs   map[string]string `json:"blobs,omitempty"`
	Commits map[string]string `json:"commits,omitempty"`
}

func (r *corpusRepo) BlobIDs(paths []string) ([]string, error) {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = r.Blobs[p]
	}
	return out, nil
}

func (r *corpusRepo) LastCommit(path string) (string, error) { return r.Commits[path], nil }

func (r *corpusRepo) Paths() ([]string, error)              { return r.Files, nil }
func (r *corpusRepo) Changed(base string) ([]string, error) { return r.Diff, nil }
func (r *corpusRepo) MergeBase(rev string) (string, error) {
	if slices.Contains(r.Refs, rev) {
		return strings.Repeat("c", 40), nil
	}
	return "", ErrRevisionNotFound
}

// corpusFiles serves the corpus's includes from testdata/ci/files: local paths as they
// are, remote URLs under files/remote/<host>/<path>.
type corpusFiles struct{}

func (corpusFiles) Local(p string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(corpusDir, "files", filepath.FromSlash(p)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrIncludeNotFound
	}
	return b, err
}

func (corpusFiles) LocalPaths() ([]string, error) {
	root := filepath.Join(corpusDir, "files")
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	return out, err
}

func (corpusFiles) Remote(u string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(corpusDir, "files", "remote", filepath.FromSlash(strings.TrimPrefix(u, "https://"))))
	if errors.Is(err, os.ErrNotExist) {
		return nil, &IncludeError{Message: "could not be fetched: HTTP 404"}
	}
	return b, err
}

// TestCorpusBad: every testdata/ci/bad/*.yml starts with "# error: <the exact message>"
// and Compile must answer exactly that *Error.
func TestCorpusBad(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(corpusDir, "bad", "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad corpus: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(src), "\n")
			want, ok := strings.CutPrefix(first, "# error: ")
			if !ok {
				t.Fatalf("%s must start with a line \"# error: <message>\"", file)
			}
			ctx := Context{Ref: "main", DefaultBranch: "main", Source: "push"}
			_, err = Compile(src, ctx)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Compile = %v, want *Error %q", err, want)
			}
			if e.Error() != want {
				t.Errorf("Compile error\n got: %s\nwant: %s", e.Error(), want)
			}
			lint := Lint(src, ctx, true)
			if lint.Valid || len(lint.Errors) != 1 || lint.Errors[0] != want {
				t.Errorf("Lint = valid %v, errors %q; want invalid with %q", lint.Valid, lint.Errors, want)
			}
		})
	}
}

// lineDiff shows the lines that differ, enough to find the change.
func lineDiff(a, b string) string {
	al, bl := lines(a), lines(b)
	var out strings.Builder
	n := max(len(al), len(bl))
	shown := 0
	for i := 0; i < n && shown < 40; i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out.WriteString("- " + x + "\n+ " + y + "\n")
			shown++
		}
	}
	return out.String()
}

func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// TestCorpusQuirksKeepTheirShape guards yaml-quirks.yml against an editor that would add
// the final newline or turn its tabs into spaces: the file is there to prove that such
// text compiles.
func TestCorpusQuirksKeepTheirShape(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(corpusDir, "yaml-quirks.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasSuffix(src, []byte("\n")) {
		t.Error("yaml-quirks.yml must end without a newline")
	}
	if !bytes.Contains(src, []byte("echo\tone\ttab")) {
		t.Error("yaml-quirks.yml must keep the tabs inside its unquoted script lines")
	}
}
