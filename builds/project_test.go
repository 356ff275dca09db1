package builds

import (
	"testing"
)

func TestJobVariablesProtected(t *testing.T) {
	p := JobProject{Project: &Project{DefaultBranch: "main"}, Variables: []ProjectVariable{
		{Key: "OPEN", Value: "1"}, {Key: "PROT", Value: "2", Protected: true}},
		Protected: ProtectedRefNames{Branches: []string{"main", "release/*"}, Tags: []string{"v*"}}}
	for ref, want := range map[string]int{"main": 2, "refs/heads/main": 2, "feature": 1, "refs/tags/v1": 2,
		"release/1.0": 2, "refs/heads/release/a/b": 2, "refs/tags/release/1": 1, "v1": 1} {
		if got := len(p.JobVariables(p.RefProtected(ref))); got != want {
			t.Errorf("JobVariables(RefProtected(%q)) has %d variables, want %d", ref, got, want)
		}
	}
	if got := (JobProject{}).JobVariables(true); got != nil {
		t.Errorf("an implicit project has variables %v", got)
	}
}
