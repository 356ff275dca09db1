package ciconfig

import (
	"strings"
	"testing"
)

// TestLintStaticIgnoresRules: the static check lists every job whatever rules, only,
// except and workflow:rules say for the Context; the dry run applies them.
func TestLintStaticIgnoresRules(t *testing.T) {
	t.Parallel()
	src := `
workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
build:
  stage: build
  script: make
test:
  stage: test
  script: make test
  needs: [build]
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
      when: manual
    - when: never
lint:
  stage: build
  script: make lint
  only: [master]
`
	static := Lint([]byte(src), mainPush, false)
	if !static.Valid || len(static.Errors) != 0 {
		t.Fatalf("static check: %+v", static)
	}
	var got []string
	for _, j := range static.Jobs {
		got = append(got, j.Name+":"+j.When)
	}
	if strings.Join(got, " ") != "build:on_success lint:on_success test:on_success" {
		t.Errorf("static jobs %v, want every job in stage then file order", got)
	}
	if n := static.Jobs[2].Needs; len(n) != 1 || n[0].Name != "build" {
		t.Errorf("test's needs %+v", n)
	}
	if dry := Lint([]byte(src), mainPush, true); dry.Valid || len(dry.Jobs) != 0 || dry.Errors[0] != ErrFilteredOut.Message {
		t.Errorf("dry run for a push to main: %+v, want filtered out", dry)
	}
	mr := Context{Ref: "feature", DefaultBranch: "main", Source: "merge_request_event"}
	if dry := Lint([]byte(src), mr, true); !dry.Valid || len(dry.Jobs) != 2 || dry.Jobs[1].When != "manual" {
		t.Errorf("dry run for a merge request from feature: %+v, want build and a manual test", dry)
	}
}
