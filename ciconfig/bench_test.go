package ciconfig

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// bigConfig writes a real-world-shaped file of n jobs over four stages: a template they
// extend, global and job variables, artifacts, a cache, rules, and needs on the previous
// stage's job of the same number.
func bigConfig(n int) []byte {
	var b strings.Builder
	b.WriteString(`stages: [build, test, package, deploy]
variables:
  GIT_DEPTH: 10
  LANG: C.UTF-8
default:
  image: golang:1.22
  tags: [docker]
  cache:
    key: go-$CI_COMMIT_REF_SLUG
    paths: [.go/]
.template:
  before_script:
    - go version
    - go env
  retry:
    max: 2
    when: [runner_system_failure]
  artifacts:
    paths: [out/]
    expire_in: 1 day
`)
	stages := []string{"build", "test", "package", "deploy"}
	per := n / len(stages)
	for i := 0; i < n; i++ {
		s := i / per
		if s >= len(stages) {
			s = len(stages) - 1
		}
		fmt.Fprintf(&b, "job-%s-%d:\n  extends: .template\n  stage: %s\n  variables:\n    SHARD: \"%d\"\n  script:\n    - make shard-%d\n    - ./check.sh $SHARD\n",
			stages[s], i, stages[s], i, i)
		if s > 0 && i%2 == 0 {
			fmt.Fprintf(&b, "  needs: [job-%s-%d]\n", stages[s-1], i-per)
		}
		if i%10 == 0 {
			b.WriteString("  rules:\n    - if: $CI_COMMIT_BRANCH == \"main\"\n    - if: $CI_PIPELINE_SOURCE == \"schedule\"\n      when: manual\n")
		}
	}
	return []byte(b.String())
}

// BenchmarkCompile2000 measures compiling a 2,000-job file; the YAML pipeline target wants the whole
// creation of such a pipeline under a second.
func BenchmarkCompile2000(b *testing.B) {
	src := bigConfig(2000)
	ctx := Context{Ref: "main", DefaultBranch: "main", Source: "push"}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		res, err := Compile(src, ctx)
		if err != nil || len(res.Jobs) != 2000 {
			b.Fatalf("%d jobs, %v", len(res.Jobs), err)
		}
	}
	b.Logf("%d bytes of YAML, 2000 jobs: %v per Compile", len(src), time.Since(start)/time.Duration(b.N))
}

// TestCompile2000 runs the benchmark's file once: 2,000 jobs compile and pass Normalize.
func TestCompile2000(t *testing.T) {
	t.Parallel()
	src := bigConfig(2000)
	start := time.Now()
	res, err := Compile(src, Context{Ref: "main", DefaultBranch: "main", Source: "push"})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2000 {
		t.Fatalf("%d jobs", len(res.Jobs))
	}
	def := builds.PipelineDefinition{ProjectID: 1, Stages: res.Stages, Jobs: res.Jobs}
	if err := def.Normalize(); err != nil {
		t.Fatal(err)
	}
	// The number that counts comes from the benchmark: under -race on a shared machine this
	// is ten times slower, so the test only logs it.
	t.Logf("Compile of 2000 jobs (%d bytes): %v", len(src), took)
}
