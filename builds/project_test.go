package builds

import (
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://user:pass@host/r.git", "https://*****:*****@host/r.git"},
		{"https://glpat-token@host/r.git", "https://*****@host/r.git"},
		{"http://u:p@10.0.0.1:8080/r.git", "http://*****:*****@10.0.0.1:8080/r.git"},
		{"https://host/r.git", "https://host/r.git"},
		{"ssh://git@host:2222/r.git", "ssh://git@host:2222/r.git"},
		{"ssh://git:pw@host/r.git", "ssh://git:*****@host/r.git"},
		{"git@host:grp/r.git", "git@host:grp/r.git"},
		{"user:secret@host:grp/r.git", "user:*****@host:grp/r.git"},
		{"git://user:secret@127.0.0.1:1/x.git", "git://user:*****@127.0.0.1:1/x.git"},
		{"file:///srv/r.git", "file:///srv/r.git"},
		{"", ""},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

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
