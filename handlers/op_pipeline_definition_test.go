package handlers

import (
	"slices"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// TestPipelineRequestJobRules: the JSON form takes needs, when, start_in and allow_failure
// in .gitlab-ci.yml's spellings, with GitLab's defaults.
func TestPipelineRequestJobRules(t *testing.T) {
	body := `{"stages": ["build", "deploy"], "jobs": [
		{"name": "a", "stage": "build", "script": "x", "allow_failure": {"exit_codes": 137}},
		{"name": "b", "stage": "build", "script": "x", "allow_failure": {"exit_codes": [1, 2]}, "needs": []},
		{"name": "c", "stage": "deploy", "script": "x", "needs": ["a", {"job": "b", "artifacts": false, "optional": true}]},
		{"name": "d", "stage": "deploy", "script": "x", "when": "manual"},
		{"name": "e", "stage": "deploy", "script": "x", "when": "manual", "allow_failure": false},
		{"name": "f", "stage": "deploy", "script": "x", "when": "delayed", "start_in": "1 hour 30 minutes"},
		{"name": "g", "stage": "deploy", "script": "x", "when": "delayed", "start_in": "90s"},
		{"name": "h", "stage": "deploy", "script": "x", "when": "delayed", "start_in": 45},
		{"name": "i", "stage": "deploy", "script": "x", "when": "delayed", "start_in": "1 week"}]}`
	var req pipelineRequest
	if err := decodeJSON(jsonRequest([]byte(body)), &req, true); err != nil {
		t.Fatal(err)
	}
	d := req.definition(1)
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	j := d.Jobs
	if !slices.Equal(j[0].AllowFailureExitCodes, []int{137}) || j[0].AllowFailure || !slices.Equal(j[1].AllowFailureExitCodes, []int{1, 2}) {
		t.Errorf("exit codes: %v %t, %v", j[0].AllowFailureExitCodes, j[0].AllowFailure, j[1].AllowFailureExitCodes)
	}
	if !j[1].NeedsDeclared || len(j[1].Needs) != 0 || j[0].NeedsDeclared {
		t.Errorf("needs: [] is declared and empty, no needs is undeclared: %+v / %+v", j[1], j[0])
	}
	want := []builds.Need{{Job: "a", Artifacts: true}, {Job: "b", Artifacts: false, Optional: true}}
	if !slices.Equal(j[2].Needs, want) {
		t.Errorf("needs %+v, want %+v", j[2].Needs, want)
	}
	if !j[3].AllowFailure || j[4].AllowFailure {
		t.Errorf("manual jobs: allow_failure %t (default) and %t (false given); want true and false", j[3].AllowFailure, j[4].AllowFailure)
	}
	for i, secs := range map[int]int{5: 5400, 6: 90, 7: 45, 8: builds.MaxStartIn} {
		if j[i].StartInSeconds != secs {
			t.Errorf("job %s: start_in %d s, want %d", j[i].Name, j[i].StartInSeconds, secs)
		}
	}
	if !d.PerJob() {
		t.Error("a definition with needs and when is not planned per job")
	}
}
