package ciconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// gitlabKeys is every key of GitLab's .gitlab-ci.yml reference (doc/ci/yaml: the global,
// header and job keywords, and the keys under them), with a file that uses it. Each must
// compile (jobapi supports it) or be a 400 naming it ("… is not supported by jobapi"):
// never "unknown keys", never dropped without a word.
var gitlabKeys = []struct{ key, yaml string }{
	// global and header keywords
	{"default", "default: {image: alpine}\njob: {script: x}\n"},
	{"include", "include: []\njob: {script: x}\n"},
	{"stages", "stages: [a]\njob: {stage: a, script: x}\n"},
	{"variables", "variables: {A: b}\njob: {script: x}\n"},
	{"workflow", "workflow: {rules: [{when: always}]}\njob: {script: x}\n"},
	{"spec", "spec: {inputs: {a: {default: b}}}\n---\njob: {script: x}\n"},
	{"types", "types: [a]\njob: {stage: a, script: x}\n"},
	// workflow
	{"workflow:rules", "workflow: {rules: [{if: $A}]}\njob: {script: x}\n"},
	{"workflow:name", "workflow: {name: n}\njob: {script: x}\n"},
	{"workflow:auto_cancel", "workflow: {auto_cancel: {on_new_commit: interruptible}}\njob: {script: x}\n"},
	{"workflow:auto_cancel:on_new_commit", "workflow: {auto_cancel: {on_new_commit: none}}\njob: {script: x}\n"},
	{"workflow:auto_cancel:on_job_failure", "workflow: {auto_cancel: {on_job_failure: all}}\njob: {script: x}\n"},
	{"workflow:rules:auto_cancel", "workflow: {rules: [{auto_cancel: {on_new_commit: none}}]}\njob: {script: x}\n"},
	{"workflow:rules:auto_cancel:on_job_failure", "workflow: {rules: [{auto_cancel: {on_job_failure: all}}]}\njob: {script: x}\n"},
	{"workflow:rules:changes", "workflow: {rules: [{changes: [a]}]}\njob: {script: x}\n"},
	{"workflow:rules:exists", "workflow: {rules: [{exists: [a]}]}\njob: {script: x}\n"},
	{"workflow:rules:variables", "workflow: {rules: [{variables: {A: b}}]}\njob: {script: x}\n"},
	// include
	{"include:local", "include: {local: a.yml}\njob: {script: x}\n"},
	{"include:remote", "include: {remote: 'https://example.com/a.yml'}\njob: {script: x}\n"},
	{"include:project", "include: {project: g/p, file: a.yml, ref: main}\njob: {script: x}\n"},
	{"include:file", "include: {file: a.yml}\njob: {script: x}\n"},
	{"include:template", "include: {template: Go.gitlab-ci.yml}\njob: {script: x}\n"},
	{"include:component", "include: {component: example.com/g/c@1}\njob: {script: x}\n"},
	{"include:inputs", "include: {local: a.yml, inputs: {a: b}}\njob: {script: x}\n"},
	{"include:integrity", "include: {remote: 'https://example.com/a.yml', integrity: 'sha256-AAAA'}\njob: {script: x}\n"},
	{"include:rules", "include: {local: a.yml, rules: [{if: $NOPE}]}\njob: {script: x}\n"},
	{"include:rules:exists", "include: {local: a.yml, rules: [{exists: [a.yml]}]}\njob: {script: x}\n"},
	{"include:rules:changes", "include: {local: a.yml, rules: [{changes: [a.yml]}]}\njob: {script: x}\n"},
	// job keywords
	{"after_script", "job: {script: x, after_script: y}\n"},
	{"allow_failure", "job: {script: x, allow_failure: {exit_codes: [3]}}\n"},
	{"artifacts", "job: {script: x, artifacts: {paths: [a]}}\n"},
	{"before_script", "job: {script: x, before_script: y}\n"},
	{"cache", "job: {script: x, cache: {key: k, paths: [a]}}\n"},
	{"coverage", "job: {script: x, coverage: '/(\\d+)%/'}\n"},
	{"dast_configuration", "job: {script: x, dast_configuration: {site_profile: s}}\n"},
	{"dependencies", "a: {stage: build, script: x}\njob: {stage: test, script: x, dependencies: [a]}\n"},
	{"environment", "job: {script: x, environment: production}\n"},
	{"extends", ".b: {script: x}\njob: {extends: .b}\n"},
	{"hooks", "job: {script: x, hooks: {pre_get_sources_script: [y]}}\n"},
	{"identity", "job: {script: x, identity: google_cloud}\n"},
	{"id_tokens", "job: {script: x, id_tokens: {T: {aud: https://example.com}}}\n"},
	{"id_tokens:aud", "job: {script: x, id_tokens: {T: {aud: [https://a.example, https://b.example]}}}\n"},
	{"image", "job: {script: x, image: alpine}\n"},
	{"inherit", "job: {script: x, inherit: {default: false, variables: false}}\n"},
	{"interruptible", "job: {script: x, interruptible: true}\n"},
	{"manual_confirmation", "job: {script: x, when: manual, manual_confirmation: 'Are you sure?'}\n"},
	{"needs", "a: {stage: build, script: x}\njob: {stage: test, script: x, needs: [a]}\n"},
	{"only", "job: {script: x, only: [branches]}\n"},
	{"except", "job: {script: x, except: [tags]}\n"},
	{"pages", "job: {script: x, pages: {publish: public}}\n"},
	{"parallel", "job: {script: x, parallel: 2}\n"},
	{"publish", "job: {script: x, publish: public}\n"},
	{"release", "job: {script: x, release: {tag_name: v1, description: d}}\n"},
	{"resource_group", "job: {script: x, resource_group: prod}\n"},
	{"retry", "job: {script: x, retry: 1}\n"},
	{"rules", "job: {script: x, rules: [{when: always}]}\n"},
	{"run", "job: {run: [{name: a, script: x}]}\n"},
	{"script", "job: {script: x}\n"},
	{"secrets", "job: {script: x, secrets: {S: {vault: a/b@c}}}\n"},
	{"services", "job: {script: x, services: [postgres]}\n"},
	{"stage", "job: {script: x, stage: test}\n"},
	{"start_in", "job: {script: x, when: delayed, start_in: 1 hour}\n"},
	{"tags", "job: {script: x, tags: [a]}\n"},
	{"timeout", "job: {script: x, timeout: 1h}\n"},
	{"trigger", "job: {trigger: g/other}\n"},
	{"trigger:include", "job: {trigger: {include: child.yml}}\n"},
	{"trigger:include:artifact", "gen: {stage: build, script: x}\njob: {trigger: {include: [{artifact: c.yml, job: gen}]}}\n"},
	{"trigger:project", "job: {trigger: {project: g/other}}\n"},
	{"type", "job: {script: x, type: test}\n"},
	{"when", "job: {script: x, when: always}\n"},
	// keys under job keywords
	{"artifacts:paths", "job: {script: x, artifacts: {paths: [a]}}\n"},
	{"artifacts:exclude", "job: {script: x, artifacts: {paths: [a], exclude: [a/b]}}\n"},
	{"artifacts:expire_in", "job: {script: x, artifacts: {paths: [a], expire_in: 1 week}}\n"},
	{"artifacts:expose_as", "job: {script: x, artifacts: {paths: [a.html], expose_as: report}}\n"},
	{"artifacts:name", "job: {script: x, artifacts: {paths: [a], name: n}}\n"},
	{"artifacts:public", "job: {script: x, artifacts: {paths: [a], public: false}}\n"},
	{"artifacts:access", "job: {script: x, artifacts: {paths: [a], access: developer}}\n"},
	{"artifacts:reports", "job: {script: x, artifacts: {reports: {junit: r.xml}}}\n"},
	{"artifacts:untracked", "job: {script: x, artifacts: {untracked: true}}\n"},
	{"artifacts:when", "job: {script: x, artifacts: {paths: [a], when: always}}\n"},
	{"cache:key", "job: {script: x, cache: {key: k, paths: [a]}}\n"},
	{"cache:key:files", "job: {script: x, cache: {key: {files: [go.sum]}, paths: [a]}}\n"},
	{"cache:key:prefix", "job: {script: x, cache: {key: {files: [go.sum], prefix: p}, paths: [a]}}\n"},
	{"cache:key:files_commits", "job: {script: x, cache: {key: {files_commits: [go.sum]}, paths: [a]}}\n"},
	{"cache:paths", "job: {script: x, cache: {paths: [a]}}\n"},
	{"cache:untracked", "job: {script: x, cache: {untracked: true}}\n"},
	{"cache:unprotect", "job: {script: x, cache: {paths: [a], unprotect: true}}\n"},
	{"cache:when", "job: {script: x, cache: {paths: [a], when: always}}\n"},
	{"cache:policy", "job: {script: x, cache: {paths: [a], policy: pull}}\n"},
	{"cache:fallback_keys", "job: {script: x, cache: {key: k, paths: [a], fallback_keys: [main]}}\n"},
	{"environment:name", "job: {script: x, environment: {name: prod}}\n"},
	{"environment:url", "job: {script: x, environment: {name: prod, url: 'https://example.com'}}\n"},
	{"environment:on_stop", "stop: {script: x, when: manual, environment: {name: prod, action: stop}}\njob: {script: x, environment: {name: prod, on_stop: stop}}\n"},
	{"environment:action", "job: {script: x, environment: {name: prod, action: prepare}}\n"},
	{"environment:auto_stop_in", "job: {script: x, environment: {name: prod, auto_stop_in: 1 day}}\n"},
	{"environment:kubernetes", "job: {script: x, environment: {name: prod, kubernetes: {namespace: n}}}\n"},
	{"environment:deployment_tier", "job: {script: x, environment: {name: prod, deployment_tier: production}}\n"},
	{"image:name", "job: {script: x, image: {name: alpine}}\n"},
	{"image:entrypoint", "job: {script: x, image: {name: alpine, entrypoint: ['']}}\n"},
	{"image:docker", "job: {script: x, image: {name: alpine, docker: {platform: arm64}}}\n"},
	{"image:kubernetes", "job: {script: x, image: {name: alpine, kubernetes: {user: '1000'}}}\n"},
	{"image:pull_policy", "job: {script: x, image: {name: alpine, pull_policy: always}}\n"},
	{"services:alias", "job: {script: x, services: [{name: postgres, alias: db}]}\n"},
	{"services:command", "job: {script: x, services: [{name: postgres, command: [postgres]}]}\n"},
	{"services:entrypoint", "job: {script: x, services: [{name: postgres, entrypoint: [sh]}]}\n"},
	{"services:pull_policy", "job: {script: x, services: [{name: postgres, pull_policy: never}]}\n"},
	{"services:variables", "job: {script: x, services: [{name: postgres, variables: {A: b}}]}\n"},
	{"services:docker", "job: {script: x, services: [{name: postgres, docker: {user: u}}]}\n"},
	{"services:kubernetes", "job: {script: x, services: [{name: postgres, kubernetes: {user: '1000'}}]}\n"},
	{"inherit:default", "job: {script: x, inherit: {default: [image]}}\n"},
	{"inherit:variables", "job: {script: x, inherit: {variables: [A]}}\n"},
	{"needs:artifacts", "a: {stage: build, script: x}\njob: {stage: test, script: x, needs: [{job: a, artifacts: false}]}\n"},
	{"needs:optional", "job: {script: x, needs: [{job: a, optional: true}]}\n"},
	{"needs:project", "job: {script: x, needs: [{project: g/p, job: a, ref: main, artifacts: true}]}\n"},
	{"needs:pipeline", "job: {script: x, needs: [{pipeline: $PARENT_PIPELINE_ID, job: a}]}\n"},
	{"needs:parallel:matrix", "a: {stage: build, script: x, parallel: {matrix: [{V: [1, 2]}]}}\njob: {stage: test, script: x, needs: [{job: a, parallel: {matrix: [{V: '1'}]}}]}\n"},
	{"only:refs", "job: {script: x, only: {refs: [main]}}\n"},
	{"only:variables", "job: {script: x, only: {variables: [$A]}}\n"},
	{"only:changes", "job: {script: x, only: {changes: [a]}}\n"},
	{"only:kubernetes", "job: {script: x, only: {kubernetes: active}}\n"},
	{"except:changes", "job: {script: x, except: {changes: [a]}}\n"},
	{"parallel:matrix", "job: {script: x, parallel: {matrix: [{A: [1, 2]}]}}\n"},
	{"retry:max", "job: {script: x, retry: {max: 2}}\n"},
	{"retry:when", "job: {script: x, retry: {max: 2, when: script_failure}}\n"},
	{"retry:exit_codes", "job: {script: x, retry: {max: 2, exit_codes: [137]}}\n"},
	{"rules:if", "job: {script: x, rules: [{if: $A}, {when: always}]}\n"},
	{"rules:changes", "job: {script: x, rules: [{changes: [a]}]}\n"},
	{"rules:changes:paths", "job: {script: x, rules: [{changes: {paths: [a]}}]}\n"},
	{"rules:changes:compare_to", "job: {script: x, rules: [{changes: {paths: [a], compare_to: main}}]}\n"},
	{"rules:exists", "job: {script: x, rules: [{exists: [a]}]}\n"},
	{"rules:exists:paths", "job: {script: x, rules: [{exists: {paths: [a]}}]}\n"},
	{"rules:exists:project", "job: {script: x, rules: [{exists: {paths: [a], project: g/p, ref: main}}]}\n"},
	{"rules:when", "job: {script: x, rules: [{when: manual}]}\n"},
	{"rules:allow_failure", "job: {script: x, rules: [{allow_failure: true}]}\n"},
	{"rules:needs", "job: {script: x, rules: [{needs: []}]}\n"},
	{"rules:variables", "job: {script: x, rules: [{variables: {A: b}}]}\n"},
	{"rules:interruptible", "job: {script: x, rules: [{interruptible: true}]}\n"},
	{"rules:start_in", "job: {script: x, rules: [{when: delayed, start_in: 1 hour}]}\n"},
	{"default:hooks", "default: {hooks: {pre_get_sources_script: [y]}}\njob: {script: x}\n"},
	{"default:id_tokens", "default: {id_tokens: {T: {aud: a}}}\njob: {script: x}\n"},
	{"default:identity", "default: {identity: google_cloud}\njob: {script: x}\n"},
}

// The keyword list of GitLab's reference (doc/ci/yaml/_index.md, its Keywords table and
// the deprecated ones), which gitlabKeys must cover whole.
var gitlabKeywords = []string{"default", "include", "stages", "variables", "workflow", "spec",
	"after_script", "allow_failure", "artifacts", "before_script", "cache", "coverage", "dast_configuration",
	"dependencies", "environment", "extends", "hooks", "identity", "id_tokens", "image", "inherit",
	"interruptible", "manual_confirmation", "needs", "pages", "parallel", "release", "resource_group",
	"retry", "rules", "script", "run", "secrets", "services", "stage", "start_in", "tags", "timeout",
	"trigger", "when", "only", "except", "type", "types", "publish"}

func TestEveryGitLabKeyIsSupportedOrRefusedByName(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	for _, k := range gitlabKeys {
		covered[k.key] = true
	}
	for _, k := range gitlabKeywords {
		if !covered[k] {
			t.Errorf("GitLab's keyword %s has no case", k)
		}
	}
	f := &files{local: map[string]string{"a.yml": "other: {script: x}\n", "child.yml": "c: {script: x}\n"},
		remote: map[string]string{"https://example.com/a.yml": "other: {script: x}\n"}}
	r := &repo{files: []string{"a", "a.yml"}, changed: map[string][]string{shaB: {"a"}}, bases: map[string]string{"main": shaM}}
	r.changed[shaM] = []string{"a"}
	for _, k := range gitlabKeys {
		c := pushed(r)
		c.Includes = f
		_, err := Compile([]byte(k.yaml), c)
		if err == nil || errors.Is(err, ErrNoJobs) || errors.Is(err, ErrFilteredOut) {
			continue // supported
		}
		// The 400 names the key, or the key above it that jobapi refuses whole (trigger for
		// trigger:include); rules:rule:exists:project for rules:exists:project.
		last := k.key[strings.LastIndexByte(k.key, ':')+1:]
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Message, "not supported by jobapi") ||
			e.Key == "" || !(strings.HasPrefix(k.key, e.Key) || strings.HasSuffix(e.Key, last)) {
			t.Errorf("%s: %v; want it compiled, or a 400 naming it as not supported by jobapi", k.key, err)
		}
	}
	// A job NAMED pages is an ordinary job (GitLab's deprecated way to deploy Pages; jobapi
	// has no Pages): its script runs like any other.
	res := mustCompile(t, "pages: {script: [mkdocs build], artifacts: {paths: [public]}}\n", mainPush)
	if got := names(res); !slices.Equal(got, []string{"pages"}) || !slices.Equal(res.Jobs[0].Script, []string{"mkdocs build"}) {
		t.Errorf("a job named pages: %v", got)
	}
}

// artifacts:expose_as, public and access reach the job's artifact entries: access (or
// public: false, which is developer) on every entry of the job, reports included, so that
// whatever the runner uploads carries it; expose_as on the archive only.
func TestArtifactsAccessAndExposeAs(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
a: {script: x, artifacts: {paths: [coverage/index.html], expose_as: Coverage report, access: none, reports: {junit: r.xml}}}
b: {script: x, artifacts: {paths: [out/], public: false}}
c: {script: x, artifacts: {paths: [out/], public: true, expose_as: out}}
d: {script: x, artifacts: {paths: [out/], access: all}}
`, mainPush)
	type entry struct{ typ, access, expose string }
	want := map[string][]entry{
		"a": {{"archive", "none", "Coverage report"}, {"junit", "none", ""}},
		"b": {{"archive", "developer", ""}},
		"c": {{"archive", "", "out"}},
		"d": {{"archive", "", ""}},
	}
	for name, w := range want {
		var got []entry
		for _, a := range job(t, res, name).Artifacts {
			got = append(got, entry{a.ArtifactType, a.Access, a.ExposeAs})
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s: %v, want %v", name, got, w)
		}
	}
}
