package ciconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestMergedYAMLReadsBack: the merged YAML of every corpus file is YAML that gives the
// same pipeline again, and printing it again gives the same text.
func TestMergedYAMLReadsBack(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join(corpusDir, "*.yml"))
	files = append(files, "testdata/merged-scalars.yml")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		checkMergedReadsBack(t, file, src, Context{Ref: "main", DefaultBranch: "main", Source: "push", Includes: corpusFiles{},
			Repository: &corpusRepo{Files: []string{"Dockerfile", "go.mod", "package.json"}}})
	}
}

func checkMergedReadsBack(t *testing.T, name string, src []byte, ctx Context) {
	t.Helper()
	first, err := Compile(src, ctx)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	again, err := Compile([]byte(first.MergedYAML), ctx)
	if err != nil {
		t.Fatalf("%s: its merged YAML does not compile: %v\n%s", name, err, first.MergedYAML)
	}
	if !reflect.DeepEqual(first.Jobs, again.Jobs) || !reflect.DeepEqual(first.Stages, again.Stages) {
		t.Fatalf("%s: its merged YAML gives other jobs:\n%+v\n%+v", name, first.Jobs, again.Jobs)
	}
	if again.MergedYAML != first.MergedYAML {
		t.Fatalf("%s: merged YAML is not a fixed point:\n%s", name, lineDiff(first.MergedYAML, again.MergedYAML))
	}
}

func TestMergedYAMLShape(t *testing.T) {
	t.Parallel()
	src := `stages: [test]
.base: &base
  variables: {A: "1"}
build:
  <<: *base
  extends: .tpl
  script: [make]
.tpl:
  tags: [docker]
`
	res, err := Compile([]byte(src), Context{Ref: "main"})
	if err != nil {
		t.Fatal(err)
	}
	want := `---
stages:
  - .pre
  - test
  - .post
.base:
  variables:
    A: "1"
build:
  tags:
    - docker
  variables:
    A: "1"
  extends: .tpl
  script:
    - make
.tpl:
  tags:
    - docker
`
	if res.MergedYAML != want {
		t.Fatalf("merged YAML:\n%s\nwant:\n%s", res.MergedYAML, want)
	}
	if !strings.HasPrefix(Lint([]byte(src), Context{Ref: "main"}, false).MergedYAML, "---\nstages:") {
		t.Fatal("Lint does not carry the merged YAML")
	}
}
