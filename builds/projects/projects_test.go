package projects

import (
	"errors"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

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
		var ve *builds.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Msg, want) || !strings.Contains(ve.Msg, "ci_config_path") {
			t.Errorf("CheckCIConfigPath(%.40q) = %v, want a ValidationError naming ci_config_path and %q", path, err, want)
		}
	}
}
