package builds

import (
	"errors"
	"strings"
	"testing"
)

func validDefinition() PipelineDefinition {
	return PipelineDefinition{ProjectID: 1, Stages: []string{"build", "test"}, Jobs: []JobDefinition{
		{Name: "compile", Stage: "build", Script: []string{"make"}},
		{Name: "unit", Stage: "test", Script: []string{"make test"}, Variables: []Variable{{Key: "GIT_STRATEGY", Value: "none"}}},
	}}
}

func TestNormalizeDefaults(t *testing.T) {
	d := validDefinition()
	d.Jobs[1].Stage = ""
	d.Stages = []string{"build", "test"}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	if d.Ref != "main" || len(d.SHA) != 40 || d.TimeoutStrategy != TimeoutPessimistic {
		t.Errorf("defaults not filled: ref %q sha %q strategy %q", d.Ref, d.SHA, d.TimeoutStrategy)
	}
	if d.Jobs[1].Stage != "test" || d.Jobs[0].TimeoutSeconds != DefaultTimeout {
		t.Errorf("job defaults not filled: %+v", d.Jobs[1])
	}
}

func TestNormalizeRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*PipelineDefinition)
		want string
	}{
		{"no project", func(d *PipelineDefinition) { d.ProjectID = 0 }, "project_id"},
		{"no jobs", func(d *PipelineDefinition) { d.Jobs = nil }, "at least one job"},
		{"unknown stage", func(d *PipelineDefinition) { d.Jobs[0].Stage = "deploy" }, "not in stages"},
		{"empty script", func(d *PipelineDefinition) { d.Jobs[0].Script = nil }, "script"},
		{"duplicate job", func(d *PipelineDefinition) { d.Jobs[1].Name = "compile" }, "used twice"},
		{"duplicate stage", func(d *PipelineDefinition) { d.Stages = []string{"build", "build"} }, "listed twice"},
		{"bad variable", func(d *PipelineDefinition) { d.Jobs[0].Variables = []Variable{{Key: "1X"}} }, "variable name"},
		{"bad strategy", func(d *PipelineDefinition) { d.TimeoutStrategy = "hopeful" }, "timeout_strategy"},
		{"bad sha", func(d *PipelineDefinition) { d.SHA = "xyz" }, "sha"},
		{"negative timeout", func(d *PipelineDefinition) { d.Jobs[0].TimeoutSeconds = -1 }, "timeout"},
		{"retry too high", func(d *PipelineDefinition) { d.Jobs[0].Retry.Max = 11 }, "retry max"},
		{"retry unknown when", func(d *PipelineDefinition) { d.Jobs[0].Retry = RetryRule{Max: 1, When: []string{"bad"}} }, "retry when"},
		{"long name", func(d *PipelineDefinition) { d.Jobs[0].Name = strings.Repeat("x", 300) }, "longer than"},
		{"empty tag", func(d *PipelineDefinition) { d.Jobs[0].Tags = []string{""} }, "tags"},
		{"unknown when", func(d *PipelineDefinition) { d.Jobs[0].When = "sometimes" }, "when must be"},
		{"when never left in", func(d *PipelineDefinition) { d.Jobs[0].When = WhenNever }, "when must be"},
		{"delayed without start_in", func(d *PipelineDefinition) { d.Jobs[0].When = WhenDelayed }, "start_in"},
		{"start_in past a week", func(d *PipelineDefinition) { d.Jobs[0].When, d.Jobs[0].StartInSeconds = WhenDelayed, MaxStartIn+1 }, "1 week"},
		{"start_in without delayed", func(d *PipelineDefinition) { d.Jobs[0].StartInSeconds = 30 }, "start_in needs when: delayed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := validDefinition()
			tt.edit(&d)
			err := d.Normalize()
			var verr *ValidationError
			if !errors.As(err, &verr) || !strings.Contains(verr.Msg, tt.want) {
				t.Fatalf("Normalize() = %v, want a ValidationError mentioning %q", err, tt.want)
			}
		})
	}
}
