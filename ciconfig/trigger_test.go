package ciconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

func TestTriggerBridgeJobs(t *testing.T) {
	src := `
stages: [build, children, deploy]
variables:
  GLOBAL: g
default:
  image: ruby:3
  before_script: [echo setup]
  tags: [docker]
build:
  stage: build
  script: make
service-a:
  stage: children
  variables:
    SERVICE: a
  trigger:
    include: services/a/.gitlab-ci.yml
    strategy: depend
service-b:
  stage: children
  trigger:
    include:
      - local: /services/b/ci.yml
      - services/common.yml
    forward:
      yaml_variables: false
      pipeline_variables: true
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
deploy:
  stage: deploy
  script: deploy
`
	res := mustCompile(t, src, mainPush)
	a := job(t, res, "service-a")
	want := &builds.Trigger{Include: []builds.TriggerInclude{{Local: "services/a/.gitlab-ci.yml"}},
		Strategy: builds.StrategyDepend, ForwardYAMLVariables: true}
	if !reflect.DeepEqual(a.Trigger, want) {
		t.Errorf("service-a trigger = %+v, want %+v", a.Trigger, want)
	}
	// default: is what runners use: a bridge takes none of it, and has no script.
	if len(a.Script) > 0 || len(a.BeforeScript) > 0 || a.Image.Name != "" || len(a.Tags) > 0 {
		t.Errorf("service-a took runner keys: %+v", a)
	}
	if v := vars(a); v["SERVICE"] != "a" || v["GLOBAL"] != "g" {
		t.Errorf("service-a variables = %v, want its own and the global ones (forwarded to the child)", v)
	}
	b := job(t, res, "service-b")
	want = &builds.Trigger{Include: []builds.TriggerInclude{{Local: "services/b/ci.yml"}, {Local: "services/common.yml"}},
		ForwardPipelineVariables: true}
	if !reflect.DeepEqual(b.Trigger, want) {
		t.Errorf("service-b trigger = %+v, want %+v", b.Trigger, want)
	}
	// Rules apply to bridges as to any job.
	res = mustCompile(t, src, Context{Ref: "feature", DefaultBranch: "main", Source: "push"})
	if got := names(res); !reflect.DeepEqual(got, []string{"build", "service-a", "deploy"}) {
		t.Errorf("jobs on a feature branch = %v", got)
	}
	// The deploy stage waits for the bridges like for any job of an earlier stage.
	if d := job(t, res, "deploy"); !reflect.DeepEqual(d.Dependencies, []string{"build", "service-a"}) {
		t.Errorf("deploy dependencies = %v", d.Dependencies)
	}
}

func TestTriggerRefusals(t *testing.T) {
	tests := []struct{ name, job, want string }{
		{"multi-project string", `trigger: group/other`, "jobs:child:trigger is not supported by jobapi yet (multi-project pipelines"},
		{"multi-project hash", `trigger: {project: group/other, branch: main}`, "trigger:project is not supported by jobapi yet (multi-project"},
		{"include project", `trigger: {include: [{project: g/p, file: a.yml}]}`, "trigger:include:project is not supported by jobapi yet (files of another project)"},
		{"include template", `trigger: {include: [{template: Jobs/SAST.gitlab-ci.yml}]}`, "trigger:include:template is not supported"},
		{"include component", `trigger: {include: [{component: gitlab.com/a/b@1}]}`, "trigger:include:component is not supported"},
		{"artifact without job", `trigger: {include: [{artifact: gen.yml}]}`, "trigger:include config must specify the job where to fetch the artifact from"},
		{"job without artifact", `trigger: {include: [{job: generate}]}`, "trigger:include config must specify the artifact"},
		{"artifact and local", `trigger: {include: [{artifact: gen.yml, job: g, local: a.yml}]}`, "exactly one of local, artifact"},
		{"artifact of no job", `trigger: {include: [{artifact: gen.yml, job: generate}]}`, "jobs:child:trigger:include undefined dependency: generate"},
		{"include remote", `trigger: {include: [{remote: "https://example.com/a.yml"}]}`, "trigger:include:remote is not supported"},
		{"include url", `trigger: {include: "https://example.com/a.yml"}`, "trigger:include is not supported"},
		{"no include", `trigger: {strategy: depend}`, "should have include"},
		{"bad strategy", `trigger: {include: a.yml, strategy: mirror}`, "trigger:strategy config should be depend"},
		{"four files", `trigger: {include: [a.yml, b.yml, c.yml, d.yml]}`, "too many entries (maximum 3)"},
		{"script", "trigger: {include: a.yml}\n  script: echo", "config contains unknown keys: script"},
		{"tags", "trigger: {include: a.yml}\n  tags: [x]", "config contains unknown keys: tags"},
		{"forward key", `trigger: {include: a.yml, forward: {secrets: true}}`, "trigger:forward config contains unknown keys: secrets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := compileError(t, "child:\n  "+tt.job+"\n")
			if !strings.Contains(e.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", e.Error(), tt.want)
			}
		})
	}
}

// trigger:include: artifact names a job that ends before the bridge: an earlier stage or
// a need (GitLab's validate_dynamic_child_pipeline_dependencies!).
func TestTriggerArtifactInclude(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
stages: [build, test]
generate: {stage: build, script: ./gen > child.yml, artifacts: {paths: [child.yml]}}
child:
  stage: test
  trigger:
    include:
      - artifact: child.yml
        job: generate
      - local: ci/common.yml
    strategy: depend
`, mainPush)
	want := &builds.Trigger{Include: []builds.TriggerInclude{{Artifact: "child.yml", Job: "generate"}, {Local: "ci/common.yml"}},
		Strategy: builds.StrategyDepend, ForwardYAMLVariables: true}
	if got := job(t, res, "child").Trigger; !reflect.DeepEqual(got, want) {
		t.Errorf("trigger = %+v, want %+v", got, want)
	}
	// The same stage is enough with needs.
	mustCompile(t, `
generate: {script: ./gen, artifacts: {paths: [c.yml]}}
child: {needs: [generate], trigger: {include: [{artifact: c.yml, job: generate}]}}
`, mainPush)
	for src, msg := range map[string]string{
		"generate: {script: ./gen}\nchild: {trigger: {include: [{artifact: c.yml, job: generate}]}}\n":                                     "jobs:child:trigger:include dependency generate is not defined in current or prior stages",
		"stages: [a, b]\ngenerate: {stage: b, script: ./gen}\nchild: {stage: a, trigger: {include: [{artifact: c.yml, job: generate}]}}\n": "dependency generate is not defined in current or prior stages",
		"generate: {script: ./gen}\nchild: {trigger: {include: [{artifact: '', job: generate}]}}\n":                                        "trigger:include:artifact config should be the path of a file",
	} {
		if e := compileError(t, src); !strings.Contains(e.Error(), msg) {
			t.Errorf("%q: %v, want %q", src, e, msg)
		}
	}
}

// A child's configuration reads include: artifact through Context.Artifacts, and its
// files' own local includes from the repository; outside a child pipeline include:
// artifact is GitLab's refusal; a transient read failure stays marked transient.
func TestIncludeArtifact(t *testing.T) {
	t.Parallel()
	tr := &builds.Trigger{Include: []builds.TriggerInclude{{Artifact: "gen/child.yml", Job: "generate"}}}
	src := ChildConfig(tr)
	if want := "include:\n  - artifact: \"gen/child.yml\"\n    job: \"generate\"\n"; string(src) != want {
		t.Fatalf("ChildConfig = %q, want %q", src, want)
	}
	f := &files{local: map[string]string{"ci/common.yml": "lint: {script: make lint}\n"}}
	art := artifactFiles{"generate": {"gen/child.yml": "include: [{local: ci/common.yml}]\ntest: {script: make test}\n"}}
	res, err := Compile(src, Context{Ref: "main", Source: builds.SourceParentPipeline, Includes: f, Artifacts: art})
	if err != nil {
		t.Fatal(err)
	}
	if n := names(res); !reflect.DeepEqual(n, []string{"lint", "test"}) {
		t.Errorf("child jobs = %v", n)
	}
	for _, c := range []struct {
		src       string
		artifacts ArtifactFiles
		want      string
		transient bool
	}{
		{"include: [{artifact: a.yml, job: g}]\nx: {script: x}\n", nil,
			"include:artifact Including configs from artifacts is only allowed when triggering child pipelines", false},
		{"include: [{artifact: a.yml}]\n", art, "include:artifact Job must be provided when including configs from artifacts", false},
		{"include: [{artifact: a.txt, job: generate}]\n", art, "Included file `a.txt` does not have YAML extension!", false},
		{"include: [{artifact: missing.yml, job: generate}]\n", art, "`missing.yml`: Path `missing.yml` does not exist inside the `generate` artifacts archive!", false},
		{"include: [{artifact: a.yml, job: flaky}]\n", art, "`a.yml`: the store is down", true},
		{"include: [{artifact: gen/child.yml, job: generate, local: x.yml}]\n", art, "exactly one of local, remote, artifact", false},
	} {
		_, err := Compile([]byte(c.src), Context{Ref: "main", Includes: f, Artifacts: c.artifacts})
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Error(), c.want) || e.Transient != c.transient {
			t.Errorf("%q: %v (transient %v), want %q (transient %v)", c.src, err, e != nil && e.Transient, c.want, c.transient)
		}
	}
}

// artifactFiles serves include: artifact files by job and path; job "flaky" answers a
// transient failure.
type artifactFiles map[string]map[string]string

func (a artifactFiles) Artifact(job, path string) ([]byte, error) {
	if job == "flaky" {
		return nil, &IncludeError{Message: "the store is down", Transient: true}
	}
	s, ok := a[job][path]
	if !ok {
		return nil, &IncludeError{Message: "Path `" + path + "` does not exist inside the `" + job + "` artifacts archive!"}
	}
	return []byte(s), nil
}

func TestChildConfig(t *testing.T) {
	tr := &builds.Trigger{Include: []builds.TriggerInclude{{Local: "ci/a.yml"}, {Local: `odd "name".yml`}}}
	got := string(ChildConfig(tr))
	want := "include:\n  - local: \"ci/a.yml\"\n  - local: \"odd \\\"name\\\".yml\"\n"
	if got != want {
		t.Errorf("ChildConfig = %q, want %q", got, want)
	}
	f := &files{local: map[string]string{"ci/a.yml": "a:\n  script: echo a\n", `odd "name".yml`: "b:\n  script: echo b\n"}}
	res, err := Compile(ChildConfig(tr), Context{Ref: "main", Source: builds.SourceParentPipeline, Includes: f})
	if err != nil {
		t.Fatal(err)
	}
	if n := names(res); !reflect.DeepEqual(n, []string{"a", "b"}) {
		t.Errorf("child jobs = %v", n)
	}
}
