package ciconfig

import (
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
		{"include artifact", `trigger: {include: [{artifact: gen.yml, job: generate}]}`, "trigger:include:artifact is not supported by jobapi yet (dynamic child pipelines"},
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
