package handlers

import (
	"encoding/json"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

func TestParseServerURL(t *testing.T) {
	for base, want := range map[string]serverURL{
		"https://ci.example.com":           {url: "https://ci.example.com", protocol: "https", host: "ci.example.com", port: "443", fqdn: "ci.example.com"},
		"http://127.0.0.1:8080":            {url: "http://127.0.0.1:8080", protocol: "http", host: "127.0.0.1", port: "8080", fqdn: "127.0.0.1:8080"},
		"https://ci.example.com:443/sub":   {url: "https://ci.example.com:443/sub", protocol: "https", host: "ci.example.com", port: "443", fqdn: "ci.example.com"},
		"http://[::1]:9000":                {url: "http://[::1]:9000", protocol: "http", host: "::1", port: "9000", fqdn: "[::1]:9000"},
		"http://jobapi.internal:80/jobapi": {url: "http://jobapi.internal:80/jobapi", protocol: "http", host: "jobapi.internal", port: "80", fqdn: "jobapi.internal"},
	} {
		if got := parseServerURL(base); got != want {
			t.Errorf("parseServerURL(%q) = %+v, want %+v", base, got, want)
		}
	}
}

// TestDependenciesShape: every dependency carries the claiming job's token; artifacts_file
// appears once an archive is stored (the artifacts work fills it) and is left out before,
// as GitLab leaves it out for a job without available artifacts.
func TestDependenciesShape(t *testing.T) {
	a := builds.Assignment{JobToken: "glcbt-claimer", Dependencies: []builds.Dependency{
		{ID: 3, Name: "compile", ArtifactsFile: &builds.ArtifactsFile{Filename: "artifacts.zip", Size: 1234}},
		{ID: 4, Name: "lint"},
	}}
	got, err := json.Marshal(dependencies(a))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"id":3,"name":"compile","token":"glcbt-claimer","artifacts_file":{"filename":"artifacts.zip","size":1234}},` +
		`{"id":4,"name":"lint","token":"glcbt-claimer"}]`
	if string(got) != want {
		t.Errorf("dependencies\n got  %s\n want %s", got, want)
	}
}
