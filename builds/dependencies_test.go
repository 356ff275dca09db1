package builds

import (
	"strconv"
	"strings"
	"testing"
)

// TestDefaultDependencies: GitLab's default for jobs that do not declare dependencies, the
// jobs that declare no artifacts left out of every list, and a list naming every earlier job
// with artifacts turned into the stage flag.
func TestDefaultDependencies(t *testing.T) {
	zip := []Artifacts{{Paths: []string{"out/"}}}
	script := []string{"true"}
	d := PipelineDefinition{ProjectID: 1, Stages: []string{"build", "test", "deploy"}, Jobs: []JobDefinition{
		{Name: "lint", Stage: "build", Script: script},
		{Name: "compile", Stage: "build", Script: script, Artifacts: zip},
		{Name: "first", Stage: "build", Script: script}, // same stage as the artifacts: none
		{Name: "unit", Stage: "test", Script: script},
		{Name: "dag", Stage: "test", Script: script, NeedsDeclared: true,
			Needs: []Need{{Job: "lint", Artifacts: true}, {Job: "compile", Artifacts: true}}},
		{Name: "dag-no-artifacts", Stage: "test", Script: script, NeedsDeclared: true, Needs: []Need{{Job: "compile"}}},
		{Name: "report", Stage: "test", Script: script, Artifacts: zip},
		{Name: "needs-nothing", Stage: "deploy", Script: script, NeedsDeclared: true},
		{Name: "declared", Stage: "deploy", Script: script, DependenciesDeclared: true, Dependencies: []string{"lint", "compile"}},
		// What the YAML compiler makes of the default: every earlier job, named.
		{Name: "declared-all", Stage: "deploy", Script: script, DependenciesDeclared: true,
			Dependencies: []string{"lint", "compile", "first", "unit", "report", "compile"}},
		{Name: "declared-none", Stage: "deploy", Script: script, DependenciesDeclared: true},
		{Name: "declared-needs", Stage: "deploy", Script: script, DependenciesDeclared: true, NeedsDeclared: true,
			Needs: []Need{{Job: "compile", Artifacts: true}, {Job: "report", Artifacts: true}}, Dependencies: []string{"compile", "report"}},
	}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lint": "[] false", "compile": "[] false", "first": "[] false", "unit": "[] true",
		"dag": "[compile] false", "dag-no-artifacts": "[] false", "needs-nothing": "[] false",
		"report": "[] true", "declared": "[compile] false", "declared-all": "[] true", "declared-none": "[] false",
		"declared-needs": "[compile report] false",
	}
	for pass := 1; pass <= 2; pass++ { // a second Normalize changes nothing
		for _, j := range d.Jobs {
			if got := fmtDeps(j); got != want[j.Name] {
				t.Errorf("pass %d: %s: dependencies, from stages = %s, want %s", pass, j.Name, got, want[j.Name])
			}
		}
		if err := d.Normalize(); err != nil {
			t.Fatal(err)
		}
	}

	// Without any artifacts in the pipeline, no job has dependencies to resolve at claim time.
	plain := validDefinition()
	if err := plain.Normalize(); err != nil {
		t.Fatal(err)
	}
	for _, j := range plain.Jobs {
		if len(j.Dependencies) > 0 || j.DependsOnStages {
			t.Errorf("%s: dependencies %v, from stages %v in a pipeline without artifacts", j.Name, j.Dependencies, j.DependsOnStages)
		}
	}
}

func fmtDeps(j JobDefinition) string {
	return "[" + strings.Join(j.Dependencies, " ") + "] " + strconv.FormatBool(j.DependsOnStages)
}
