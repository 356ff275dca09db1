package ciconfig

import (
	"slices"
	"testing"
)

// GitLab drops the only: [branches, tags] default when workflow:rules are given
// (Entry::Processable#compose!): a job that says nothing then runs in a merge request
// pipeline; without workflow:rules it does not.
func TestOnlyDefaultAndWorkflowRules(t *testing.T) {
	t.Parallel()
	mr := Context{Ref: "feature", DefaultBranch: "main", Source: "merge_request_event"}
	plain := `
lint:
  script: make lint
  only: [merge_requests]
test:
  script: make test
`
	if got := names(mustCompile(t, plain, mr)); !slices.Equal(got, []string{"lint"}) {
		t.Errorf("without workflow:rules, a merge request pipeline has %v; want [lint]", got)
	}
	withWorkflow := `
workflow:
  rules:
    - when: always
` + plain
	if got := names(mustCompile(t, withWorkflow, mr)); !slices.Equal(got, []string{"lint", "test"}) {
		t.Errorf("with workflow:rules, a merge request pipeline has %v; want [lint test]", got)
	}
	// except alone keeps the only default.
	exceptOnly := `
build:
  script: make
  except: [main]
`
	if _, err := Compile([]byte(exceptOnly), mr); err != ErrNoJobs {
		t.Errorf("except without only in a merge request pipeline: %v; want ErrNoJobs", err)
	}
	if got := names(mustCompile(t, exceptOnly, Context{Ref: "dev", Source: "push"})); !slices.Equal(got, []string{"build"}) {
		t.Errorf("except: [main] on dev: %v", got)
	}
}

func TestPlural(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"push": "pushes", "schedule": "schedules", "merge_request": "merge_requests",
		"trigger": "triggers", "api": "apis", "web": "webs", "pipeline": "pipelines"} {
		if got := plural(in); got != want {
			t.Errorf("plural(%q) = %q, want %q", in, got, want)
		}
	}
}
