package builds

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func dagJobs() []JobDefinition {
	return []JobDefinition{
		{Name: "compile", Stage: "build", Script: []string{"make"}},
		{Name: "lint", Stage: "build", Script: []string{"make lint"}, NeedsDeclared: true},
		{Name: "unit", Stage: "test", Script: []string{"make test"}, NeedsDeclared: true,
			Needs: []Need{{Job: "compile", Artifacts: true}}, Dependencies: []string{"compile"}, DependenciesDeclared: true},
		{Name: "ship", Stage: "deploy", Script: []string{"make ship"}, NeedsDeclared: true,
			Needs: []Need{{Job: "unit"}, {Job: "lint"}, {Job: "docs", Optional: true}}},
	}
}

func TestValidateNeedsAccepts(t *testing.T) {
	t.Parallel()
	if err := ValidateNeeds([]string{"build", "test", "deploy"}, dagJobs()); err != nil {
		t.Fatalf("a valid DAG: %v", err)
	}
	// A need on a job of the same stage is allowed (GitLab since 14.2).
	jobs := dagJobs()
	jobs[1].Needs = []Need{{Job: "compile"}}
	if err := ValidateNeeds([]string{"build", "test", "deploy"}, jobs); err != nil {
		t.Fatalf("a need in the same stage: %v", err)
	}
}

func TestValidateNeedsRejects(t *testing.T) {
	t.Parallel()
	stages := []string{"build", "test", "deploy"}
	for _, tc := range []struct {
		name string
		edit func(j []JobDefinition)
		want string
	}{
		{"unknown need", func(j []JobDefinition) { j[2].Needs = append(j[2].Needs, Need{Job: "gone"}) },
			`job "unit" needs "gone", which is not a job of this pipeline`},
		{"itself", func(j []JobDefinition) { j[2].Needs = []Need{{Job: "unit"}} }, `job "unit" needs itself`},
		{"later stage", func(j []JobDefinition) { j[0].Needs = []Need{{Job: "unit"}} },
			`job "compile" (stage build) needs "unit" of the later stage test`},
		{"cycle", func(j []JobDefinition) {
			j[0].Needs = []Need{{Job: "lint"}}
			j[1].Needs = []Need{{Job: "compile"}}
		}, "needs make a cycle: compile → lint → compile"},
		{"unknown dependency", func(j []JobDefinition) { j[3].Dependencies = []string{"unit", "package"} },
			`job "ship": dependency "package" is not a job of this pipeline`},
	} {
		jobs := dagJobs()
		tc.edit(jobs)
		err := ValidateNeeds(stages, jobs)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Msg != tc.want {
			t.Errorf("%s: got %v, want ValidationError %q", tc.name, err, tc.want)
		}
	}
}

// A long chain of needs inside one stage must neither overflow nor crawl; a cycle closing
// it is found.
func TestValidateNeedsLongChain(t *testing.T) {
	t.Parallel()
	const n = MaxJobsPerPipeline
	jobs := make([]JobDefinition, n)
	for i := range jobs {
		jobs[i] = JobDefinition{Name: fmt.Sprintf("j%d", i), Stage: "test", Script: []string{"true"}}
		if i > 0 {
			jobs[i].Needs = []Need{{Job: fmt.Sprintf("j%d", i-1)}}
		}
	}
	if err := ValidateNeeds([]string{"test"}, jobs); err != nil {
		t.Fatalf("chain: %v", err)
	}
	jobs[0].Needs = []Need{{Job: fmt.Sprintf("j%d", n-1)}}
	err := ValidateNeeds([]string{"test"}, jobs)
	if err == nil || !strings.Contains(err.Error(), "needs make a cycle: j0 → j4999 → j4998") {
		t.Fatalf("closed chain: %v", err)
	}
}

func TestNormalizeChecksNeeds(t *testing.T) {
	t.Parallel()
	d := validDefinition()
	d.Jobs[0].Needs = []Need{{Job: "unit"}}
	var ve *ValidationError
	if err := d.Normalize(); !errors.As(err, &ve) || !strings.Contains(ve.Msg, "later stage") {
		t.Fatalf("Normalize with a need on a later stage: %v", err)
	}
}
