package ciconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// FuzzCompile: no input makes Compile panic or hang; every refusal is an *Error; every
// pipeline it returns is one builds.Normalize accepts. Seeds: the corpus, good and bad.
func FuzzCompile(f *testing.F) {
	for _, pattern := range []string{"*.yml", "bad/*.yml"} {
		files, _ := filepath.Glob(filepath.Join(corpusDir, pattern))
		for _, file := range files {
			if src, err := os.ReadFile(file); err == nil {
				f.Add(string(src), "main", false)
			}
		}
	}
	f.Add("a: &a [x]\nb: *a\njob: {script: *a, parallel: 2, needs: []}\n", "v1.0", true)
	f.Fuzz(func(t *testing.T, src, ref string, tag bool) {
		ctx := Context{Ref: ref, RefIsTag: tag, DefaultBranch: "main", Source: "push"}
		res, err := Compile([]byte(src), ctx)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Compile error %T %v, want *Error", err, err)
			}
			return
		}
		def := builds.PipelineDefinition{ProjectID: 1, Ref: "main", Stages: res.Stages, Jobs: res.Jobs}
		if err := def.Normalize(); err != nil {
			t.Fatalf("Compile gave a pipeline Normalize refuses: %v\n%s", err, src)
		}
		if lint := Lint([]byte(src), ctx, true); !lint.Valid || len(lint.Jobs) != len(res.Jobs) {
			t.Fatalf("Lint disagrees with Compile: %+v", lint.Errors)
		}
		if !strings.HasPrefix(res.MergedYAML, "---\n") {
			t.Fatalf("merged YAML %q", res.MergedYAML)
		}
		checkMergedReadsBack(t, "fuzz input", []byte(src), ctx)
	})
}
