package runnerclient

import (
	"strings"
	"testing"
)

// TestDecodeJobStrict: the strict decoding takes what GitLab sends (job_info.id included),
// and refuses a field gitlab-runner does not know and a value of the wrong type, which the
// runner would drop or fail on.
func TestDecodeJobStrict(t *testing.T) {
	const ok = `{"id": 7, "token": "glcbt-x", "job_info": {"id": 7, "name": "unit", "stage": "test",
		"project_jobs_running_on_instance_runners_count": "+Inf"},
		"dependencies": [{"id": 5, "name": "compile", "token": "glcbt-x", "artifacts_file": {"filename": "a.zip", "size": 3}}],
		"cache": [{"key": "k", "untracked": false, "policy": "pull", "paths": ["v/"], "when": "on_success", "fallback_keys": []}]}`
	j, err := DecodeJobStrict([]byte(ok))
	if err != nil {
		t.Fatalf("DecodeJobStrict(GitLab's shape) = %v", err)
	}
	if j.ID != 7 || j.JobInfo.Name != "unit" || j.Dependencies[0].ArtifactsFile.Filename != "a.zip" ||
		j.Cache[0].Policy != "pull" || string(j.Raw) != ok {
		t.Errorf("decoded %+v", j)
	}
	for name, body := range map[string]string{
		"unknown top-level field": `{"id": 7, "pipeline_variables": []}`,
		"unknown nested field":    `{"id": 7, "git_info": {"ref": "main", "commit": "x"}}`,
		"number for a string":     `{"id": 7, "job_info": {"project_jobs_running_on_instance_runners_count": 3}}`,
		"string for a number":     `{"id": "7"}`,
		"object for a list":       `{"id": 7, "cache": {"key": "k"}}`,
	} {
		if _, err := DecodeJobStrict([]byte(body)); err == nil {
			t.Errorf("%s: DecodeJobStrict(%s) accepted it", name, strings.Join(strings.Fields(body), " "))
		}
	}
}
