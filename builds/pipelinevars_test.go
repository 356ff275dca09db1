package builds

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeOriginDefaults(t *testing.T) {
	d := validDefinition()
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	if d.Source != SourceAPI || d.BeforeSHA != ZeroSHA || len(d.Variables) != 0 {
		t.Errorf("source %q, before_sha %q, variables %v; want api, zeros, none", d.Source, d.BeforeSHA, d.Variables)
	}
	d = validDefinition()
	d.Source, d.BeforeSHA = SourcePush, strings.Repeat("ab", 20)
	d.Variables = []Variable{{Key: "A", Value: "1"}, {Key: "B", Value: "x", File: true}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	if d.Source != SourcePush || d.BeforeSHA != strings.Repeat("ab", 20) || len(d.Variables) != 2 {
		t.Errorf("kept source %q, before_sha %q, variables %v", d.Source, d.BeforeSHA, d.Variables)
	}
}

func TestNormalizeOriginRejects(t *testing.T) {
	many := make([]Variable, MaxVariables+1)
	for i := range many {
		many[i] = Variable{Key: "V" + strings.Repeat("x", i)}
	}
	for name, tt := range map[string]struct {
		edit func(*PipelineDefinition)
		want string
	}{
		"unknown source":     {func(d *PipelineDefinition) { d.Source = "merge_request_event" }, "source"},
		"short before_sha":   {func(d *PipelineDefinition) { d.BeforeSHA = "abc" }, "before_sha"},
		"ref like an option": {func(d *PipelineDefinition) { d.Ref = "--upload-pack=x" }, "ref"},
		"bad variable name":  {func(d *PipelineDefinition) { d.Variables = []Variable{{Key: "1A"}} }, "pipeline variable name"},
		"variable twice":     {func(d *PipelineDefinition) { d.Variables = []Variable{{Key: "A"}, {Key: "A"}} }, "twice"},
		"value too long": {func(d *PipelineDefinition) {
			d.Variables = []Variable{{Key: "A", Value: strings.Repeat("x", MaxVariableValue+1)}}
		}, "longer"},
		"masked":             {func(d *PipelineDefinition) { d.Variables = []Variable{{Key: "A", Value: "secret-value", Masked: true}} }, "cannot be masked"},
		"too many variables": {func(d *PipelineDefinition) { d.Variables = many }, "at most"},
	} {
		t.Run(name, func(t *testing.T) {
			d := validDefinition()
			tt.edit(&d)
			var verr *ValidationError
			if err := d.Normalize(); !errors.As(err, &verr) || !strings.Contains(verr.Msg, tt.want) {
				t.Fatalf("Normalize() = %v, want a ValidationError mentioning %q", err, tt.want)
			}
		})
	}
}
