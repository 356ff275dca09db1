package builds

import (
	"errors"
	"strings"
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

func TestValidateRepoURL(t *testing.T) {
	good := []string{"", "https://h/r.git", "http://u:p@h:1/r", "ssh://git@h/r.git", "git://h/r.git",
		"file:///srv/r.git", "file://localhost/srv/r.git", "git@github.com:grp/r.git", "h:grp/r.git"}
	bad := []string{"ftp://h/r", "https:///r", "file://other/srv/r.git", "../r.git", "/srv/r.git", "https://h/a b",
		"r.git", "javascript:alert(1)", "https://h/\nr", strings.Repeat("a", 2049)}
	for _, u := range good {
		if err := ValidateRepoURL(u); err != nil {
			t.Errorf("ValidateRepoURL(%q) = %v, want ok", u, err)
		}
	}
	for _, u := range bad {
		if err := ValidateRepoURL(u); err == nil {
			t.Errorf("ValidateRepoURL(%.40q) = ok, want an error", u)
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

func TestMaskedProjectVariableRules(t *testing.T) {
	yes, long, short := true, "12345678", "1234567"
	if _, err := newVariable("K", VariableChange{Value: &long, Masked: &yes}); err != nil {
		t.Errorf("8 characters masked: %v", err)
	}
	if _, err := newVariable("K", VariableChange{Value: &short, Masked: &yes}); err == nil {
		t.Errorf("7 characters masked: accepted")
	}
	multi := "12345678\n"
	if _, err := newVariable("K", VariableChange{Value: &multi, Masked: &yes}); err == nil {
		t.Errorf("a multi-line masked value: accepted")
	}
}

func TestCheckCIConfigPath(t *testing.T) {
	for _, ok := range []string{"", ".gitlab-ci.yml", "ci/pipeline.yml", ".ci/main.yaml", "a b/c.yml"} {
		if err := CheckCIConfigPath(ok); err != nil {
			t.Errorf("CheckCIConfigPath(%q) = %v, want nil", ok, err)
		}
	}
	for path, want := range map[string]string{
		"ci.yml@group/other":         "another project",
		"https://example.com/ci.yml": "a URL",
		"--upload-pack=x":            "not starting with '-'",
		"/abs/ci.yml":                "relative",
		"ci/":                        "relative",
		"../ci.yml":                  "'..'",
		"ci//x.yml":                  "empty",
		"ci/./x.yml":                 "'.'",
		"a:b.yml":                    `':'`,
		"a\nb.yml":                   `'\n'`,
		strings.Repeat("c", 256):     "longer than 255",
	} {
		err := CheckCIConfigPath(path)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Msg, want) || !strings.Contains(ve.Msg, "ci_config_path") {
			t.Errorf("CheckCIConfigPath(%.40q) = %v, want a ValidationError naming ci_config_path and %q", path, err, want)
		}
	}
}
