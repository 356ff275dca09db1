package ciconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

var mainPush = Context{Ref: "main", DefaultBranch: "main", Source: "push"}

func mustCompile(t *testing.T, src string, ctx Context) Result {
	t.Helper()
	res, err := Compile([]byte(src), ctx)
	if err != nil {
		t.Fatalf("Compile: %v\n%s", err, src)
	}
	// Normalize fills defaults and condenses dependencies: check it accepts a copy.
	def := builds.PipelineDefinition{ProjectID: 1, Stages: res.Stages, Jobs: slices.Clone(res.Jobs)}
	if err := def.Normalize(); err != nil {
		t.Fatalf("Normalize refuses the result: %v", err)
	}
	return res
}

func compileError(t *testing.T, src string) *Error {
	t.Helper()
	_, err := Compile([]byte(src), mainPush)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Compile = %v, want an *Error\n%s", err, src)
	}
	return e
}

func job(t *testing.T, res Result, name string) builds.JobDefinition {
	t.Helper()
	for _, j := range res.Jobs {
		if j.Name == name {
			return j
		}
	}
	t.Fatalf("no job %q in %v", name, names(res))
	return builds.JobDefinition{}
}

func names(res Result) []string {
	var out []string
	for _, j := range res.Jobs {
		out = append(out, j.Name)
	}
	return out
}

func vars(j builds.JobDefinition) map[string]string {
	m := map[string]string{}
	for _, v := range j.Variables {
		m[v.Key] = v.Value
	}
	return m
}

func TestWhenAndAllowFailure(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
manual: {script: x, when: manual}
manual-strict: {script: x, when: manual, allow_failure: false}
manual-by-rule: {script: x, rules: [{when: manual}]}
manual-by-rule-allowed: {script: x, rules: [{when: manual, allow_failure: true}]}
codes: {script: x, allow_failure: {exit_codes: 42}}
always: {script: x, when: always}
failure: {script: x, when: on_failure}
delayed: {script: x, when: delayed, start_in: 1 day}
delayed-by-rule: {script: x, rules: [{when: delayed, start_in: "90 minutes"}]}
`, mainPush)
	for _, tc := range []struct {
		name    string
		when    string
		allow   bool
		codes   []int
		startIn int
	}{
		{"manual", "manual", true, nil, 0}, // GitLab: a manual job may fail by default
		{"manual-strict", "manual", false, nil, 0},
		{"manual-by-rule", "manual", false, nil, 0}, // inside rules it may not
		{"manual-by-rule-allowed", "manual", true, nil, 0},
		{"codes", "on_success", false, []int{42}, 0},
		{"always", "always", false, nil, 0},
		{"failure", "on_failure", false, nil, 0},
		{"delayed", "delayed", false, nil, 86400},
		{"delayed-by-rule", "delayed", false, nil, 5400},
	} {
		j := job(t, res, tc.name)
		if j.When != tc.when || j.AllowFailure != tc.allow || !reflect.DeepEqual(j.AllowFailureExitCodes, tc.codes) || j.StartInSeconds != tc.startIn {
			t.Errorf("%s: when %s allow %v codes %v start_in %d; want %s %v %v %d", tc.name, j.When, j.AllowFailure,
				j.AllowFailureExitCodes, j.StartInSeconds, tc.when, tc.allow, tc.codes, tc.startIn)
		}
	}
}

func TestRulesChooseFirstMatch(t *testing.T) {
	t.Parallel()
	src := `
variables: {LEVEL: global}
deploy:
  script: x
  variables: {LEVEL: job, KEEP: job}
  rules:
    - if: $CI_COMMIT_TAG
      variables: {LEVEL: tag}
    - if: $CI_COMMIT_BRANCH == "main" && $LEVEL == "job"
      variables: {LEVEL: main}
      allow_failure: true
    - if: $CI_PIPELINE_SOURCE == "schedule"
      when: never
    - when: manual
`
	for _, tc := range []struct {
		ctx   Context
		want  string // LEVEL, or "" when the job is left out
		when  string
		allow bool
	}{
		{Context{Ref: "v1", RefIsTag: true}, "tag", "on_success", false},
		{Context{Ref: "main"}, "main", "on_success", true},
		{Context{Ref: "dev", Source: "schedule"}, "", "", false},
		{Context{Ref: "dev"}, "job", "manual", false},
		// Project and pipeline variables win over the file's in rules, as in GitLab.
		{Context{Ref: "main", Variables: []builds.Variable{{Key: "LEVEL", Value: "project"}}}, "job", "manual", false},
	} {
		res, err := Compile([]byte(src+"other: {script: y}\n"), tc.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if len(res.Jobs) != 1 {
				t.Errorf("%+v: jobs %v, want deploy left out", tc.ctx, names(res))
			}
			continue
		}
		j := job(t, res, "deploy")
		if got := vars(j); got["LEVEL"] != tc.want || got["KEEP"] != "job" || j.When != tc.when || j.AllowFailure != tc.allow {
			t.Errorf("%+v: LEVEL %s KEEP %s when %s allow %v; want %s job %s %v", tc.ctx, got["LEVEL"], got["KEEP"], j.When, j.AllowFailure, tc.want, tc.when, tc.allow)
		}
	}
}

func TestRulesSeeJobAndPredefinedVariables(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
stages: [build, test]
a:
  stage: test
  variables: {FLAVOR: "full"}
  script: x
  rules: [{if: '$FLAVOR == "full" && $CI_JOB_NAME == "a" && $CI_JOB_STAGE == "test"'}]
b:
  script: x
  rules: [{if: '$CI_DEFAULT_BRANCH == "trunk" && $CI_COMMIT_SHA == "abc" && $CI_COMMIT_REF_NAME == "trunk"'}]
c:
  script: x
  rules: [{if: '$CI_PIPELINE_SOURCE == "api"'}]
d:
  script: x
  rules: [{if: '$CI_COMMIT_TAG'}]
`, Context{Ref: "trunk", DefaultBranch: "trunk", SHA: "abc"})
	if got := strings.Join(names(res), ","); got != "a,b,c" {
		t.Fatalf("jobs %s, want a,b,c (source defaults to api; no tag on a branch)", got)
	}
}

// workflow:auto_cancel reaches the Result; the first matching workflow rule's auto_cancel
// replaces workflow's key by key (GitLab merges them so), and a rule that does not match
// changes nothing.
func TestWorkflowAutoCancel(t *testing.T) {
	t.Parallel()
	src := `
workflow:
  auto_cancel: {on_new_commit: interruptible, on_job_failure: all}
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      auto_cancel: {on_new_commit: none}
    - if: $CI_COMMIT_TAG
      auto_cancel: {on_job_failure: none, on_new_commit: conservative}
    - when: always
job: {script: x}
`
	for _, c := range []struct {
		ctx  Context
		want builds.AutoCancel
	}{
		{Context{Ref: "main"}, builds.AutoCancel{OnNewCommit: "none", OnJobFailure: "all"}},
		{Context{Ref: "v1", RefIsTag: true}, builds.AutoCancel{OnNewCommit: "conservative", OnJobFailure: "none"}},
		{Context{Ref: "feature"}, builds.AutoCancel{OnNewCommit: "interruptible", OnJobFailure: "all"}},
	} {
		if got := mustCompile(t, src, c.ctx).AutoCancel; got != c.want {
			t.Errorf("%s: auto_cancel %+v, want %+v", c.ctx.Ref, got, c.want)
		}
	}
	// Without workflow:auto_cancel a rule's alone counts; without either, nothing is set
	// and builds fills GitLab's defaults.
	res := mustCompile(t, "workflow: {rules: [{auto_cancel: {on_job_failure: all}}]}\njob: {script: x}\n", mainPush)
	if res.AutoCancel != (builds.AutoCancel{OnJobFailure: "all"}) {
		t.Errorf("a rule's auto_cancel alone: %+v", res.AutoCancel)
	}
	res = mustCompile(t, "job: {script: x}\n", mainPush)
	def := builds.PipelineDefinition{ProjectID: 1, Stages: res.Stages, Jobs: res.Jobs, AutoCancel: res.AutoCancel}
	if err := def.Normalize(); err != nil || def.AutoCancel != (builds.AutoCancel{OnNewCommit: "conservative", OnJobFailure: "none"}) {
		t.Errorf("defaults: %+v, %v", def.AutoCancel, err)
	}
	def.AutoCancel.OnJobFailure = "sometimes"
	if err := def.Normalize(); err == nil {
		t.Error("builds accepted on_job_failure: sometimes")
	}
}

func TestWorkflowRules(t *testing.T) {
	t.Parallel()
	src := `
workflow:
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      variables: {TARGET: prod}
    - if: $CI_COMMIT_BRANCH =~ /^feature/
variables: {TARGET: none}
job: {script: x}
`
	res := mustCompile(t, src, Context{Ref: "main"})
	if vars(res.Jobs[0])["TARGET"] != "prod" {
		t.Fatalf("workflow rule variables: %v", res.Jobs[0].Variables)
	}
	res = mustCompile(t, src, Context{Ref: "feature/x"})
	if vars(res.Jobs[0])["TARGET"] != "none" {
		t.Fatalf("feature: %v", res.Jobs[0].Variables)
	}
	_, err := Compile([]byte(src), Context{Ref: "dev"})
	if !errors.Is(err, ErrFilteredOut) || err.Error() != "Pipeline filtered out by workflow rules." {
		t.Fatalf("dev: %v, want ErrFilteredOut", err)
	}
	lint := Lint([]byte(src), Context{Ref: "dev"}, true)
	if lint.Valid || lint.Errors[0] != "Pipeline filtered out by workflow rules." || lint.MergedYAML == "" {
		t.Fatalf("lint of a filtered-out pipeline: %+v", lint)
	}
	_, err = Compile([]byte("job: {script: x, rules: [{if: $NOPE}]}\n"), mainPush)
	if !errors.Is(err, ErrNoJobs) {
		t.Fatalf("rules leave no job: %v", err)
	}
}

func TestVariablesValues(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
variables:
  INT: 10
  OCTAL: 010
  FLOAT: 1.10
  BIG: 1e20
  BOOL: yes
  QUOTED: "yes"
  EMPTY:
  DESCRIBED: {value: "v", description: "shown in the run form", options: [v, w]}
  RAW: {value: "$NOT_EXPANDED", expand: false}
  NOVALUE: {description: "only a description"}
job:
  script: x
  variables: {INT: 11, JOBONLY: "j"}
`, mainPush)
	j := res.Jobs[0]
	want := map[string]string{"INT": "11", "OCTAL": "8", "FLOAT": "1.1", "BIG": "1.0e+20", "BOOL": "true", "QUOTED": "yes",
		"EMPTY": "", "DESCRIBED": "v", "RAW": "$NOT_EXPANDED", "NOVALUE": "", "JOBONLY": "j"}
	if got := vars(j); !reflect.DeepEqual(got, want) {
		t.Fatalf("variables %v\nwant %v", got, want)
	}
	for _, v := range j.Variables {
		if v.Raw != (v.Key == "RAW") {
			t.Errorf("%s raw %v", v.Key, v.Raw)
		}
	}
	if j.Variables[0].Key != "INT" {
		t.Errorf("a job variable replaces the global one in its place: %v", j.Variables)
	}
	for src, want := range map[string]string{
		"variables: {1BAD: x}\njob: {script: x}\n":                                           `variables "1BAD" is not a valid variable name`,
		"variables: {A: [x]}\njob: {script: x}\n":                                            "variables:A variable definition must be either a string or a hash",
		"variables: {A: {value: x, options: [y]}}\njob: {script: x}\n":                       "variables:A config value must be present in options",
		"job: {script: x, variables: {A: {value: x, description: d}}}\n":                     "jobs:job:variables:A config uses invalid data keys: description",
		"job: {script: x, variables: {A: {value: x, expand: maybe}}}\n":                      "jobs:job:variables:A:expand config should be a boolean value",
		"job: {script: x, variables: [A]}\n":                                                 "jobs:job:variables config should be a hash of key value pairs, value can be a hash",
		"variables: {V: x}\njob: {script: x, inherit: {variables: 1}}\n":                     "jobs:job:inherit:variables config should be a boolean value or an array of strings",
		"job: {script: x, inherit: {default: [image, nope]}}\n":                              "jobs:job:inherit:default config contains unknown values: nope",
		"job: {script: x, variables: {X: {value: {a: b}}}}\n":                                "jobs:job:variables:X value should be a string",
		"job: {script: x, image: {name: i, variables: {A: x}}}\n":                            "jobs:job:image config contains unknown keys: variables",
		"job: {script: x, services: [{name: s, variables: {A: [1]}}]}\n":                     "jobs:job:services:variables:A variable definition must be either a string or a hash",
		"job: {script: x, services: [{alias: db}]}\n":                                        "jobs:job:services config: the service needs a name (name: ruby:3.3)",
		"job: {script: x, image: {name: i, docker: {platform: arm64}}}\n":                    "jobs:job:image:docker is not supported by jobapi yet (executor options: platform, user)",
		"job: {script: x, image: {name: i, pull_policy: sometimes}}\n":                       "jobs:job:image:pull_policy config should be one of: always, never, if-not-present",
		"job: {script: x, services: redis}\n":                                                "jobs:job:services config should be an array of strings or hashes",
		"job: {script: x, image: [a]}\n":                                                     "jobs:job:image config should be a hash or a string",
		"job: {script: x, tags: docker}\n":                                                   "jobs:job:tags config should be an array of strings",
		"job: {script: x, tags: [1]}\n":                                                      "jobs:job:tags config should be an array of strings",
		"job: {script: x, timeout: 3600}\n":                                                  `jobs:job:timeout config should be a duration, such as "1h 30m" or "3 hours"`,
		"job: {script: x, timeout: 2 months}\n":                                              "jobs:job:timeout config should not exceed the limit (1 month)",
		"job: {script: x, when: later}\n":                                                    "jobs:job:when config should be one of: on_success, on_failure, always, manual, delayed",
		"job: {script: x, when: delayed, start_in: 2 weeks}\n":                               "jobs:job:start_in config should not exceed the limit (1 week)",
		"job: {script: x, start_in: 1 hour}\n":                                               "jobs:job:start_in should be blank unless when: delayed",
		"job: {script: x, start_in: 1 hour, rules: [{when: delayed}]}\n":                     "jobs:job config key may not be used with `rules`: start_in",
		"job: {script: x, rules: [{when: delayed}]}\n":                                       "jobs:job:rules:rule start_in should be a duration when when: delayed",
		"job: {script: x, rules: [{when: sometimes}]}\n":                                     "jobs:job:rules:rule when unknown value: sometimes",
		"job: {script: x, rules: [{if: [a]}]}\n":                                             "jobs:job:rules:rule if should be a string",
		"job: {script: x, rules: {if: $A}}\n":                                                "jobs:job:rules config should be an array of hashes",
		"job: {script: x, rules: [{exists: [Dockerfile]}]}\n":                                "jobs:job:rules:rule:exists cannot be answered: the pipeline has no repository to read (the project's repo_url)",
		"job: {script: x, rules: [{exists: {paths: [a], project: g/p}}]}\n":                  "jobs:job:rules:rule:exists:project is not supported by jobapi yet (files of another project)",
		"job: {script: x, rules: [{exists: {paths: [a], regexp: x}}]}\n":                     "jobs:job:rules:rule:exists:regexp is not supported by jobapi yet",
		"job: {script: x, rules: [{exists: {ref: main}}]}\n":                                 "jobs:job:rules:rule:exists:ref is not supported by jobapi yet (needs exists:project)",
		"job: {script: x, rules: [{exists: {}}]}\n":                                          "jobs:job:rules:rule:exists paths can't be blank",
		"job: {script: x, rules: [{changes: {compare_to: main}}]}\n":                         "jobs:job:rules:rule:changes paths can't be blank",
		"job: {script: x, rules: [{changes: {paths: [a], compare: main}}]}\n":                "jobs:job:rules:rule:changes config contains unknown keys: compare",
		"job: {script: x, rules: [{changes: a}]}\n":                                          "jobs:job:rules:rule:changes config should be an array of strings or a hash",
		"job: {script: x, rules: [{changes: {paths: [a], compare_to: ''}}]}\n":               "jobs:job:rules:rule:changes:compare_to config can't be blank",
		"job: {script: x, only: {changes: {paths: [a]}}}\n":                                  "jobs:job:only:changes config should be an array of strings",
		"job: {script: x, rules: [{interruptible: yes please}]}\n":                           "jobs:job:rules:rule:interruptible config should be a boolean value",
		"workflow: {rules: [{if: $A, when: manual}]}\njob: {script: x}\n":                    "workflow:rules:rule when unknown value: manual (one of: always, never)",
		"workflow: {rules: [{changes: {paths: [a], compare_to: main}}]}\njob: {script: x}\n": "workflow:rules:rule:changes cannot be answered: the pipeline has no repository to read (the project's repo_url)",
		"workflow: [a]\njob: {script: x}\n":                                                  "workflow config should be a hash",
		"workflow: {auto_cancel: {on_new_commit: always}}\njob: {script: x}\n":               "workflow:auto_cancel on new commit must be one of: conservative, interruptible, none",
		"workflow: {auto_cancel: {on_job_failure: true}}\njob: {script: x}\n":                "workflow:auto_cancel on job failure must be one of: none, all",
		"workflow: {auto_cancel: {on_failure: all}}\njob: {script: x}\n":                     "workflow:auto_cancel config contains unknown keys: on_failure",
		"workflow: {auto_cancel: all}\njob: {script: x}\n":                                   "workflow:auto_cancel config should be a hash",
		"workflow: {rules: [{auto_cancel: {on_job_failure: some}}]}\njob: {script: x}\n":     "workflow:rules:rule:auto_cancel on job failure must be one of: none, all",
		"job: {script: x, rules: [{auto_cancel: {on_job_failure: all}}]}\n":                  "jobs:job:rules:rule config contains unknown keys: auto_cancel",
		"stages: build\njob: {script: x}\n":                                                  "stages config should be an array of strings",
		"stages: ['']\njob: {script: x}\n":                                                   "stages config should hold stage names of 1 to 255 characters",
		"default: {image: a}\nimage: b\njob: {script: x}\n":                                  "default image is defined in top-level and `default:` entry",
		"default: {interruptible: 1}\njob: {script: x}\n":                                    "default:interruptible config should be a boolean value",
		"default: {stage: build}\njob: {script: x}\n":                                        "default config contains unknown keys: stage",
		"default: {image: [x]}\njob: {script: x}\n":                                          "default:image config should be a hash or a string",
		"job: {script: []}\n":                                                                "jobs:job:script can't be blank",
		"job: {script: null}\n":                                                              "jobs:job:script can't be blank",
		"job: {script: [[[[[[[[[[[x]]]]]]]]]]]}\n":                                           "jobs:job:script config should be a string or a nested array of strings up to 10 levels deep",
		"job: {script: [true]}\n":                                                            `jobs:job:script config should be a string or a nested array of strings up to 10 levels deep; "true" is a boolean: quote it`,
		"job: {script: x, before_script: {a: b}}\n":                                          "jobs:job:before_script config should be a string or a nested array of strings",
		"job: script\n":                                                               "jobs:job config should implement the script:, run:, or trigger: keyword",
		"job: {trigger: other/project}\n":                                             "jobs:job:trigger is not supported by jobapi yet (multi-project pipelines",
		"job: {script: x, extends: 1}\n":                                              "jobs:job:extends config should be an array of strings or a string",
		".base: x\njob: {script: x, extends: .base}\n":                                "jobs:job:extends invalid base hashes in `extends` (.base)",
		"job: {script: x, parallel: 201}\n":                                           "jobs:job:parallel config should be an integer between 1 and 200, or a hash with matrix:",
		"job: {script: x, parallel: 0}\n":                                             "jobs:job:parallel config should be an integer between 1 and 200",
		"job: {script: x, parallel: {matrix: [{A: [x, x]}]}}\n":                       `jobs:job:parallel:matrix config generates the job "job: [x]" twice`,
		"job: {script: x, parallel: {matrix: {A: x}}}\n":                              "jobs:job:parallel:matrix config should be an array of hashes",
		"job: {script: x, parallel: {matrix: [{A: []}]}}\n":                           "jobs:job:parallel:matrix A has an empty list of values",
		"job: {script: x, needs: build}\n":                                            "jobs:job:needs config should be an array of strings or hashes",
		"job: {script: x, needs: [{job: a, pipeline: $PARENT}]}\n":                    "jobs:job:needs need of another pipeline or project is not supported by jobapi yet",
		"job: {script: x, needs: [{artifacts: true}]}\n":                              "jobs:job:needs config: each need names a job (job: build)",
		"a: {script: x}\njob: {script: x, needs: [{job: a, artifacts: no_thanks}]}\n": "jobs:job:needs:artifacts config should be a boolean value",
		"job: {script: x, needs: [job]}\n":                                            "jobs:job:needs a job cannot need itself",
		"job: {script: x, dependencies: x}\n":                                         "jobs:job:dependencies config should be an array of strings",
		"job: {script: x, inherit: true}\n":                                           "jobs:job:inherit config should be a hash",
		"spec: {inputs: {a: {}}}\n---\njob: {script: x}\n":                            "spec is not supported: the header document (spec:inputs) is not supported by jobapi yet",
		"- a\n- b\n":                         "Invalid configuration format: the top level must be a hash of jobs and keywords",
		"":                                   "Please provide content of .gitlab-ci.yml",
		"# only a comment\n":                 "Please provide content of .gitlab-ci.yml",
		"job: {script: !custom x}\n":         "uses the YAML tag !custom, which is not supported (only !reference is)",
		"job: {script: !reference {a: b}}\n": "!reference must be a list of keys, like !reference [.setup, script]",
		"job: {script: !reference []}\n":     "!reference [] is not valid",
		"job: {script: [!reference [.a, script]]}\n.a: {script: !reference [job, script]}\n": `!reference [".a", "script"] is part of a circular chain`,
		"job: {script: x, <<: 1}\n": "<< must merge a mapping (an alias such as *defaults) or a list of them",
	} {
		e := compileError(t, src)
		if !strings.Contains(e.Error(), want) {
			t.Errorf("%q:\n got %s\nwant it to contain %s", src, e.Error(), want)
		}
	}
}

func TestUnsupportedJobKeysAreNamed(t *testing.T) {
	t.Parallel()
	for key := range jobUnsupported {
		e := compileError(t, fmt.Sprintf("deploy:\n  script: x\n  %s: something\n", key))
		want := fmt.Sprintf("jobs:deploy:%s is not supported by jobapi yet", key)
		if !strings.HasPrefix(e.Error(), want) || e.Line != 3 || e.Job != "deploy" || e.Key != key {
			t.Errorf("%s: %q (line %d), want %q… at line 3", key, e.Error(), e.Line, want)
		}
	}
}

func TestExtendsMergesAsGitLab(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
.a:
  image: {name: a, entrypoint: [sh]}
  variables: {A: a, SHARED: a}
  tags: [a1, a2]
  script: [from a]
  cache: {key: a, paths: [x]}
.b:
  image: {name: b}
  variables: {B: b, SHARED: b}
  tags: [b]
.c:
  extends: .a
  variables: {C: c}
  artifacts: {paths: [c]}
job:
  extends: [.c, .b]
  variables: {SHARED: job}
  cache: {policy: pull}
other-job:
  extends: job
  script: [own]
`, mainPush)
	j := job(t, res, "job")
	// Hashes merge at every level: image keeps .a's entrypoint with .b's name.
	if j.Image.Name != "b" || !reflect.DeepEqual(j.Image.Entrypoint, []string{"sh"}) {
		t.Errorf("image %+v", j.Image)
	}
	if got := vars(j); !reflect.DeepEqual(got, map[string]string{"A": "a", "SHARED": "job", "C": "c", "B": "b"}) {
		t.Errorf("variables %v", got)
	}
	// Arrays are replaced whole, the later parent winning.
	if !reflect.DeepEqual(j.Tags, []string{"b"}) || !reflect.DeepEqual(j.Script, []string{"from a"}) {
		t.Errorf("tags %v script %v", j.Tags, j.Script)
	}
	if len(j.Cache) != 1 || j.Cache[0].Key != "a" || j.Cache[0].Policy != "pull" || !reflect.DeepEqual(j.Cache[0].Paths, []string{"x"}) {
		t.Errorf("cache %+v", j.Cache)
	}
	if len(j.Artifacts) != 1 || j.Artifacts[0].Paths[0] != "c" {
		t.Errorf("artifacts %+v", j.Artifacts)
	}
	o := job(t, res, "other-job") // a job may extend another job
	if o.Image.Name != "b" || o.Script[0] != "own" {
		t.Errorf("other-job %+v", o)
	}
}

func TestReferences(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
.setup:
  script: [echo one, echo two]
  vars: {A: "1"}
.more:
  script:
    - !reference [.setup, script]
    - echo three
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      when: manual
job:
  script:
    - !reference [.more, script]
    - [nested, [deeper]]
  variables: !reference [.setup, vars]
  rules:
    - !reference [.more, rules]
`, mainPush)
	j := res.Jobs[0]
	if !reflect.DeepEqual(j.Script, []string{"echo one", "echo two", "echo three", "nested", "deeper"}) {
		t.Errorf("script %q", j.Script)
	}
	if vars(j)["A"] != "1" || j.When != "manual" {
		t.Errorf("variables %v when %s", j.Variables, j.When)
	}
	// References resolve after extends: they see what extends merged.
	res = mustCompile(t, `
.base: {before_script: [base]}
.tpl: {extends: .base, script: [tpl]}
job:
  script:
    - !reference [.tpl, before_script]
    - !reference [.tpl, script]
`, mainPush)
	if !reflect.DeepEqual(res.Jobs[0].Script, []string{"base", "tpl"}) {
		t.Errorf("script %q", res.Jobs[0].Script)
	}
	e := compileError(t, "job: {script: [!reference [.nope, script]]}\n")
	if e.Error() != `!reference [".nope", "script"] could not be found (line 1)` {
		t.Errorf("%s", e)
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
.defaults: &defaults
  image: a
  tags: [x]
  variables: {A: "1"}
.more: &more
  image: b
  retry: 1
first:
  <<: [*defaults, *more]   # the earlier mapping wins
  script: x
second:
  image: set-before
  <<: *defaults            # Psych: a merge key replaces keys set before it
  script: x
third:
  <<: *defaults
  image: set-after         # and keys after it replace the merged ones
  script: x
repeated:
  script: first
  script: last             # a repeated key: the last wins (GitLab accepts it)
`, mainPush)
	if j := job(t, res, "first"); j.Image.Name != "a" || j.Retry.Max != 1 || j.Tags[0] != "x" {
		t.Errorf("first %+v", j)
	}
	if j := job(t, res, "second"); j.Image.Name != "a" {
		t.Errorf("second image %s", j.Image.Name)
	}
	if j := job(t, res, "third"); j.Image.Name != "set-after" {
		t.Errorf("third image %s", j.Image.Name)
	}
	if j := job(t, res, "repeated"); j.Script[0] != "last" {
		t.Errorf("repeated script %v", j.Script)
	}
}

func TestParallelNamesAndNeeds(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
stages: [build, test, deploy]
build:
  stage: build
  parallel: 2
  script: make
test:
  stage: test
  parallel:
    matrix:
      - OS: [linux, mac]
        ARCH: amd64
  variables: {OS: overridden, KEEP: k}
  script: make test
  rules:
    - if: $OS == "mac"
      when: manual
    - when: on_success
deploy:
  stage: deploy
  needs: [build, {job: test, artifacts: false}]
  dependencies: [build]
  script: ./deploy
`, mainPush)
	want := []string{"build 1/2", "build 2/2", "test: [linux, amd64]", "test: [mac, amd64]", "deploy"}
	if got := names(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("names %q", got)
	}
	b2 := job(t, res, "build 2/2")
	if b2.NodeIndex != 2 || b2.NodeTotal != 2 {
		t.Errorf("build 2/2 node %d/%d", b2.NodeIndex, b2.NodeTotal)
	}
	mac := job(t, res, "test: [mac, amd64]")
	if v := vars(mac); v["OS"] != "mac" || v["ARCH"] != "amd64" || v["KEEP"] != "k" || mac.When != "manual" || mac.NodeIndex != 2 {
		t.Errorf("matrix copy: vars %v when %s node %d (matrix values win and rules see them)", v, mac.When, mac.NodeIndex)
	}
	d := job(t, res, "deploy")
	var needs []string
	for _, n := range d.Needs {
		needs = append(needs, fmt.Sprintf("%s:%v", n.Job, n.Artifacts))
	}
	if got := strings.Join(needs, ","); got != "build 1/2:true,build 2/2:true,test: [linux, amd64]:false,test: [mac, amd64]:false" {
		t.Errorf("needs %s", got)
	}
	if !reflect.DeepEqual(d.Dependencies, []string{"build 1/2", "build 2/2"}) {
		t.Errorf("dependencies %v", d.Dependencies)
	}
}

func TestNeedsAndDependencies(t *testing.T) {
	t.Parallel()
	src := `
stages: [build, test, deploy]
lib: {stage: build, script: x, rules: [{if: $WITH_LIB}]}
app: {stage: build, script: x}
test: {stage: test, script: x, needs: [{job: lib, optional: true}, app]}
pkg: {stage: test, script: x, needs: [{job: app, artifacts: false}]}
docs: {stage: test, script: x, needs: []}
ship: {stage: deploy, script: x, dependencies: [lib, app]}
last: {stage: deploy, script: x}
`
	res := mustCompile(t, src, mainPush)
	check := func(name string, needs, deps []string) {
		t.Helper()
		j := job(t, res, name)
		var got []string
		for _, n := range j.Needs {
			got = append(got, n.Job)
		}
		if !reflect.DeepEqual(got, needs) || !reflect.DeepEqual(j.Dependencies, deps) || !j.DependenciesDeclared {
			t.Errorf("%s: needs %v deps %v; want %v %v", name, got, j.Dependencies, needs, deps)
		}
	}
	check("test", []string{"app"}, []string{"app"}) // the optional need on the absent lib is dropped
	check("pkg", []string{"app"}, nil)              // artifacts: false: needed, not downloaded
	check("docs", nil, nil)
	if !job(t, res, "docs").NeedsDeclared {
		t.Error("needs: [] must stay declared: the job starts at once")
	}
	check("ship", nil, []string{"app"}) // declared dependencies, only jobs of this pipeline
	check("last", nil, []string{"app", "test", "pkg", "docs"})

	// A non-optional need on a job rules left out fails the creation, as in GitLab.
	_, err := Compile([]byte(`
lib: {stage: build, script: x, rules: [{if: $WITH_LIB}]}
test: {script: x, needs: [lib]}
`), mainPush)
	var e *Error
	if !errors.As(err, &e) || e.Error() != "jobs:test:needs 'test' job needs 'lib' job, but 'lib' is not in any previous stage (line 3)" {
		t.Fatalf("need on a removed job: %v", err)
	}
	// rules:needs replaces the job's needs.
	res = mustCompile(t, `
a: {stage: build, script: x}
b: {stage: build, script: x}
c:
  script: x
  needs: [a]
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      needs: [b]
    - when: on_success
`, mainPush)
	if c := job(t, res, "c"); len(c.Needs) != 1 || c.Needs[0].Job != "b" {
		t.Errorf("rules:needs: %+v", c.Needs)
	}
}

func TestArtifactsAndCache(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
reports-only:
  script: x
  artifacts:
    expire_in: never
    reports:
      junit: [a.xml, b.xml]
      dotenv: build.env
      sast: gl-sast.json
      lsif: dump.lsif
      coverage_report: {coverage_format: jacoco, path: jacoco.xml}
untracked:
  script: x
  artifacts: {untracked: true, when: on_failure, exclude: ["*.log"], name: "logs-$CI_JOB_ID"}
caches:
  script: x
  cache:
    - {key: one, paths: [a], when: always, untracked: true, fallback_keys: [main-one]}
    - {paths: [b], policy: push}
    - {key: 42, policy: $CACHE_POLICY}
`, mainPush)
	got := job(t, res, "reports-only").Artifacts
	want := []builds.Artifacts{
		{Name: "junit.xml", Paths: []string{"a.xml", "b.xml"}, When: "always", ArtifactType: "junit", ArtifactFormat: "gzip", ExpireIn: "never"},
		{Name: ".env", Paths: []string{"build.env"}, When: "always", ArtifactType: "dotenv", ArtifactFormat: "gzip", ExpireIn: "never"},
		{Name: "gl-sast-report.json", Paths: []string{"gl-sast.json"}, When: "always", ArtifactType: "sast", ArtifactFormat: "raw", ExpireIn: "never"},
		{Name: "lsif.json", Paths: []string{"dump.lsif"}, When: "always", ArtifactType: "lsif", ArtifactFormat: "zip", ExpireIn: "never"},
		{Name: "jacoco-coverage.xml", Paths: []string{"jacoco.xml"}, When: "always", ArtifactType: "jacoco", ArtifactFormat: "gzip", ExpireIn: "never"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reports (no archive without paths or untracked):\n%+v\nwant\n%+v", got, want)
	}
	if got := job(t, res, "untracked").Artifacts; len(got) != 1 || !got[0].Untracked || got[0].When != "on_failure" ||
		got[0].ArtifactType != "archive" || got[0].ArtifactFormat != "zip" || got[0].Exclude[0] != "*.log" || got[0].Name != "logs-$CI_JOB_ID" {
		t.Errorf("untracked archive %+v", got)
	}
	wantCache := []builds.Cache{
		{Key: "one", Untracked: true, Policy: "pull-push", Paths: []string{"a"}, When: "always", FallbackKeys: []string{"main-one"}},
		{Key: "default", Policy: "push", Paths: []string{"b"}, When: "on_success"},
		{Key: "42", Policy: "$CACHE_POLICY", When: "on_success"},
	}
	if got := job(t, res, "caches").Cache; !reflect.DeepEqual(got, wantCache) {
		t.Errorf("caches\n%+v\nwant\n%+v", got, wantCache)
	}
	for src, want := range map[string]string{
		"job: {script: x, cache: [{}, {}, {}, {}, {}]}\n":                         "jobs:job:cache config no more than 4 caches can be created",
		"job: {script: x, cache: {key: a/b}}\n":                                   `jobs:job:cache:key config cannot contain the "/" character`,
		"job: {script: x, cache: {key: ..}}\n":                                    `jobs:job:cache:key config cannot be "." or ".."`,
		"job: {script: x, cache: {policy: pull-only}}\n":                          "jobs:job:cache:policy config should be one of: pull-push, pull, push",
		"job: {script: x, cache: {fallback_keys: [a, b, c, d, e, f]}}\n":          "jobs:job:cache:fallback_keys config must be an array of up to 5 strings",
		"job: {script: x, cache: {paths: a}}\n":                                   "jobs:job:cache:paths config should be an array of strings",
		"job: {script: x, artifacts: {paths: [a], when: sometimes}}\n":            "jobs:job:artifacts:when config should be on_success, on_failure or always",
		"job: {script: x, artifacts: {paths: [a], expire_in: soon}}\n":            "jobs:job:artifacts:expire_in config should be a duration",
		"job: {script: x, artifacts: {reports: {nope: a}}}\n":                     "jobs:job:artifacts:reports config contains unknown keys: nope",
		"job: {script: x, artifacts: {expose_as: Build}}\n":                       "jobs:job:artifacts:paths can't be blank",
		"job: {script: x, artifacts: {paths: ['*.html'], expose_as: Build}}\n":    "jobs:job:artifacts:paths can't contain '*' when used with 'expose_as'",
		"job: {script: x, artifacts: {paths: [a], expose_as: '-x'}}\n":            "jobs:job:artifacts:expose_as can contain only letters, digits, '-', '_' and spaces",
		"job: {script: x, artifacts: {paths: [a], expose_as: [a]}}\n":             "jobs:job:artifacts:expose_as config should be a string",
		"job: {script: x, artifacts: {paths: [a], public: false, access: all}}\n": "jobs:job:artifacts config please use only one the following keys: access, public",
		"job: {script: x, artifacts: {paths: [a], access: everyone}}\n":           "jobs:job:artifacts:access should be one of: none, developer, all",
		"job: {script: x, artifacts: {paths: [a], public: 'no'}}\n":               "jobs:job:artifacts:public config should be a boolean value",
		"job: {script: x, artifacts: {reports: {coverage_report: {path: a}}}}\n":  "coverage_format should be cobertura or jacoco",
		"job: {script: x, artifacts: [a]}\n":                                      "jobs:job:artifacts config should be a hash",
		"job: {script: x, retry: {max: 1, when: [cosmic_rays]}}\n":                "jobs:job:retry:when config contains unknown values: cosmic_rays",
		"job: {script: x, retry: {max: 3}}\n":                                     "jobs:job:retry max config must be between 0 and 2",
		"job: {script: x, retry: {tries: 1}}\n":                                   "jobs:job:retry config contains unknown keys: tries",
		"job: {script: x, allow_failure: {exit_codes: [a]}}\n":                    "jobs:job:allow_failure:exit_codes config should be an integer or an array of integers",
		"job: {script: x, allow_failure: {}}\n":                                   "jobs:job:allow_failure config missing required keys: exit_codes",
	} {
		if e := compileError(t, src); !strings.Contains(e.Error(), want) {
			t.Errorf("%q:\n got %s\nwant %s", src, e.Error(), want)
		}
	}
}

func TestRetryReasonsJobapiNeverSees(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, "job: {script: x, retry: {max: 2, when: [api_failure, script_failure, always]}}\nc: {script: x, cache: {unprotect: true}}\n", mainPush)
	if got := res.Jobs[0].Retry; got.Max != 2 || !reflect.DeepEqual(got.When, []string{"script_failure", "always"}) {
		t.Errorf("retry %+v", got)
	}
	w := strings.Join(res.Warnings, "\n")
	if !strings.Contains(w, "jobs:job:retry:when api_failure: jobapi never fails a job for this reason; ignored") ||
		strings.Contains(w, "unprotect") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if c := res.Jobs[1].Cache; len(c) != 1 || !c[0].Unprotect {
		t.Errorf("cache %+v, want unprotect kept (its key is shared with unprotected refs)", c)
	}
}

func TestDefaultsAndInherit(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
default:
  image: {name: golang, pull_policy: if-not-present}
  services: [redis, {name: postgres, alias: db, command: [postgres, -c, fsync=off], entrypoint: [sh]}]
  before_script: [setup]
  after_script: [teardown]
  tags: [linux]
  timeout: 1h 30m
  retry: {max: 1}
  cache: {paths: [vendor]}
  artifacts: {paths: [out]}
variables: {A: a, B: b}
all: {script: x}
own: {script: x, image: alpine, tags: [arm], before_script: [], timeout: 10m}
none: {script: x, inherit: {default: false, variables: false}}
some: {script: x, inherit: {default: [tags], variables: [B]}}
`, mainPush)
	all := job(t, res, "all")
	if all.Image.Name != "golang" || all.Image.PullPolicy[0] != "if-not-present" || len(all.Services) != 2 ||
		all.Services[1].Alias != "db" || all.Services[1].Command[2] != "fsync=off" || all.Services[1].Entrypoint[0] != "sh" ||
		all.BeforeScript[0] != "setup" || all.AfterScript[0] != "teardown" || all.Tags[0] != "linux" ||
		all.TimeoutSeconds != 5400 || all.Retry.Max != 1 || len(all.Cache) != 1 || len(all.Artifacts) != 1 || len(all.Variables) != 2 {
		t.Errorf("all defaults: %+v", all)
	}
	own := job(t, res, "own")
	if own.Image.Name != "alpine" || own.Tags[0] != "arm" || len(own.BeforeScript) != 0 || own.TimeoutSeconds != 600 || own.AfterScript[0] != "teardown" {
		t.Errorf("own: %+v", own)
	}
	none := job(t, res, "none")
	if none.Image.Name != "" || none.Tags != nil || none.Variables != nil || none.TimeoutSeconds != 0 {
		t.Errorf("none: %+v", none)
	}
	some := job(t, res, "some")
	if some.Image.Name != "" || some.Tags[0] != "linux" || len(some.Variables) != 1 || some.Variables[0].Key != "B" {
		t.Errorf("some: %+v", some)
	}
}

func TestHiddenJobsAreNotChecked(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, ".broken: {script: {a: b}, only: [main], nonsense: 1}\n.text: just a string\njob: {script: x}\n", mainPush)
	if len(res.Jobs) != 1 {
		t.Fatalf("%v", names(res))
	}
}

func TestStagesAndOrder(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
stages: [build, build, test, deploy]
z-deploy: {stage: deploy, script: x}
a-test: {script: x}
post: {stage: .post, script: x}
pre: {stage: .pre, script: x}
b-build: {stage: build, script: x}
a-build: {stage: build, script: x}
`, mainPush)
	if got := strings.Join(names(res), ","); got != "pre,b-build,a-build,a-test,z-deploy,post" {
		t.Errorf("order %s: stage order, then file order", got)
	}
	if got := strings.Join(res.Stages, ","); got != ".pre,build,test,deploy,.post" {
		t.Errorf("stages %s", got)
	}
	res = mustCompile(t, "only: {stage: deploy, script: x}\n", mainPush)
	if got := strings.Join(res.Stages, ","); got != "deploy" {
		t.Errorf("stages %s: only the stages that have jobs", got)
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"30": 30, "30s": 30, "90 minutes": 5400, "1h 30m": 5400, "1h30m": 5400, "1.5h": 5400, "3 hours": 10800,
		"2d": 172800, "1 week": 604800, "1 week and 2 days": 777600, "1 hr, 2 mins": 3720, "01:30:00": 5400,
		"90:00": 5400, "1 month": 2592000, "1 day 12 hours": 129600, "2 Hours": 7200,
	} {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "1 fortnight", "h", "1:2:3:4", "1..5h", "-5m", "1h#"} {
		if got, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %d, want an error", in, got)
		}
	}
}

func TestLintShape(t *testing.T) {
	t.Parallel()
	src := `
build: {stage: build, script: make, tags: [docker], before_script: [setup]}
test: {script: make test, needs: [build], when: manual}
`
	lint := Lint([]byte(src), mainPush, false)
	b, err := json.Marshal(lint)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"valid", "errors", "warnings", "merged_yaml", "jobs"} {
		if _, ok := got[k]; !ok {
			t.Errorf("lint answer has no %q: %s", k, b)
		}
	}
	if !lint.Valid || len(lint.Jobs) != 2 {
		t.Fatalf("%+v", lint)
	}
	wantBuild := LintJob{Name: "build", Stage: "build", BeforeScript: []string{"setup"}, Script: []string{"make"}, AfterScript: []string{},
		TagList: []string{"docker"}, When: "on_success"}
	if !reflect.DeepEqual(lint.Jobs[0], wantBuild) {
		t.Errorf("build %+v", lint.Jobs[0])
	}
	wantTest := LintJob{Name: "test", Stage: "test", BeforeScript: []string{}, Script: []string{"make test"}, AfterScript: []string{},
		TagList: []string{}, When: "manual", AllowFailure: true, Needs: []LintNeed{{Name: "build", Artifacts: true}}}
	if !reflect.DeepEqual(lint.Jobs[1], wantTest) {
		t.Errorf("test %+v", lint.Jobs[1])
	}
	bad := Lint([]byte("job: {script: {a: b}}\n"), mainPush, false)
	if bad.Valid || len(bad.Errors) != 1 || bad.Errors[0] != "jobs:job:script config should be a string or a nested array of strings up to 10 levels deep (line 1)" || len(bad.Jobs) != 0 {
		t.Errorf("bad lint %+v", bad)
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Line: 3, Job: "build", Key: "script", Message: "config should be a string"}, "jobs:build:script config should be a string (line 3)"},
		{Error{Job: "build", Message: "config contains unknown keys: x"}, "jobs:build config contains unknown keys: x"},
		{Error{Line: 1, Key: "stages", Message: "config should be an array of strings"}, "stages config should be an array of strings (line 1)"},
		{Error{Message: "Pipeline filtered out by workflow rules."}, "Pipeline filtered out by workflow rules."},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

// Runners are matched on tags, so GitLab expands variables in them when it creates the
// pipeline; an undefined variable stays as written.
func TestTagsExpandVariables(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
variables: {ARCH: amd64}
build:
  tags: [$ARCH, "${OS}-runner", "%ARCH%", $UNDEFINED, "$EMPTY"]
  variables: {OS: linux, EMPTY: ""}
  script: x
matrix:
  parallel: {matrix: [{ARCH: [arm64, riscv]}]}
  tags: [$ARCH]
  script: x
  rules:
    - if: $ARCH == "riscv"
      variables: {ARCH: riscv64}
    - when: on_success
project:
  tags: [$RUNNER_POOL]
  script: x
`, Context{Ref: "main", Variables: []builds.Variable{{Key: "RUNNER_POOL", Value: "fast"}}})
	if got := job(t, res, "build").Tags; !reflect.DeepEqual(got, []string{"amd64", "linux-runner", "amd64", "$UNDEFINED"}) {
		t.Errorf("build tags %q", got)
	}
	if got := job(t, res, "matrix: [arm64]").Tags; !reflect.DeepEqual(got, []string{"arm64"}) {
		t.Errorf("matrix tags %q", got)
	}
	if got := job(t, res, "matrix: [riscv]").Tags; !reflect.DeepEqual(got, []string{"riscv64"}) {
		t.Errorf("matrix rule tags %q", got)
	}
	if got := job(t, res, "project").Tags; !reflect.DeepEqual(got, []string{"fast"}) {
		t.Errorf("project tags %q", got)
	}
}

// The common workflow that avoids duplicate pipelines relies on CI_COMMIT_BRANCH being
// absent in merge request pipelines.
func TestMergeRequestPipelinesHaveNoBranchVariable(t *testing.T) {
	t.Parallel()
	src := `
workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
      variables: {KIND: mr}
    - if: $CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS
      when: never
    - if: $CI_COMMIT_BRANCH
      variables: {KIND: branch}
    - if: $CI_COMMIT_TAG
      variables: {KIND: tag}
job:
  script: x
  rules:
    - if: $CI_COMMIT_BRANCH
      variables: {SAW_BRANCH: "yes"}
    - when: on_success
`
	for _, tc := range []struct {
		ctx       Context
		kind, saw string
		filtered  bool
	}{
		{Context{Ref: "feature", Source: "merge_request_event"}, "mr", "", false},
		{Context{Ref: "feature", Source: "push"}, "branch", "yes", false},
		{Context{Ref: "feature", Source: "push", Variables: []builds.Variable{{Key: "CI_OPEN_MERGE_REQUESTS", Value: "group/p!1"}}}, "", "", true},
		{Context{Ref: "v1", RefIsTag: true, Source: "push"}, "tag", "", false},
	} {
		res, err := Compile([]byte(src), tc.ctx)
		if tc.filtered {
			if !errors.Is(err, ErrFilteredOut) {
				t.Errorf("%+v: %v, want filtered out", tc.ctx, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if v := vars(res.Jobs[0]); v["KIND"] != tc.kind || v["SAW_BRANCH"] != tc.saw {
			t.Errorf("%+v: KIND %q SAW_BRANCH %q; want %q %q", tc.ctx, v["KIND"], v["SAW_BRANCH"], tc.kind, tc.saw)
		}
	}
}

func TestDefaultWarnsOnce(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, "default: {retry: {max: 1, when: [api_failure]}}\na: {script: x}\nb: {script: x}\n", mainPush)
	if len(res.Warnings) != 1 || !strings.HasPrefix(res.Warnings[0], "default:retry:when api_failure") {
		t.Errorf("warnings %q", res.Warnings)
	}
}

func TestDependenciesOnAMatrixNeed(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
build: {stage: build, script: x, parallel: {matrix: [{OS: [linux, mac]}]}}
test:
  script: x
  needs: [{job: build, parallel: {matrix: [{OS: linux}]}}]
  dependencies: [build]
`, mainPush)
	if got := job(t, res, "test").Dependencies; !reflect.DeepEqual(got, []string{"build: [linux]", "build: [mac]"}) {
		t.Errorf("dependencies %q", got)
	}
}
