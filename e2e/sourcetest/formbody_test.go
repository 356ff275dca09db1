package sourcetest_test

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// multipartBody is a multipart/form-data body with fields in the order given, as curl -F
// sends them; a field named "@name" is a file part.
func multipartBody(t *testing.T, fields ...[2]string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		if name, ok := strings.CutPrefix(f[0], "@"); ok {
			fw, err := w.CreateFormFile(name, "vars.txt")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = fw.Write([]byte(f[1]))
			continue
		}
		if err := w.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

// TestPipelineFromRefFormBodies: POST …/pipeline takes GitLab's form encodings, as curl
// --data and -F send them (ref and variables[][key|value|variable_type], several
// variables in the order sent); before, a form body answered 415. What a form cannot carry
// is a 400 naming the field, and nothing is written.
func TestPipelineFromRefFormBodies(t *testing.T) {
	t.Parallel()
	m := newMonorepo(t)
	sha := m.Commit(map[string]string{".gitlab-ci.yml": fromRefCI, "ci/lint.yml": "lint:\n  stage: test\n  script: lint\n"})
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + m.Bare}, &project)
	path := fmt.Sprintf("/api/v4/projects/%d/pipeline", project.ID)
	const urlencoded = "application/x-www-form-urlencoded"

	twoVars := "ref=main&variables[][key]=DEPLOY&variables[][value]=yes&variables[][key]=NOTE&variables[][value]=a%26b&variables[][variable_type]=file"
	mp, mpType := multipartBody(t, [2]string{"ref", "main"},
		[2]string{"variables[][key]", "DEPLOY"}, [2]string{"variables[][value]", "yes"},
		[2]string{"variables[][key]", "NOTE"}, [2]string{"variables[][value]", "a&b"}, [2]string{"variables[][variable_type]", "file"})
	queryRefOnly, qType := multipartBody(t, [2]string{"variables[][key]", "DEPLOY"}, [2]string{"variables[][value]", "yes"})
	for _, c := range []struct {
		name, query string
		body        []byte
		ctype       string
		wantVars    []api.PipelineVariableValue
	}{
		{"curl --data", "", []byte(twoVars), urlencoded, []api.PipelineVariableValue{
			{Key: "DEPLOY", Value: "yes", VariableType: "env_var"}, {Key: "NOTE", Value: "a&b", VariableType: "file"}}},
		{"curl -F", "", mp, mpType, []api.PipelineVariableValue{
			{Key: "DEPLOY", Value: "yes", VariableType: "env_var"}, {Key: "NOTE", Value: "a&b", VariableType: "file"}}},
		{"ref in the query, variables in the form", "?ref=main", queryRefOnly, qType, []api.PipelineVariableValue{
			{Key: "DEPLOY", Value: "yes", VariableType: "env_var"}}},
		{"ref only", "", []byte("ref=main"), urlencoded, []api.PipelineVariableValue{}},
	} {
		resp, b := inst.Do(t, "POST", path+c.query, c.body, "Content-Type", c.ctype)
		jobapitest.WantStatus(t, resp, b, http.StatusCreated)
		p := decode[api.Pipeline](t, b)
		want := []string{"api_only", "build", "lint"}
		if len(c.wantVars) > 0 {
			want = []string{"api_only", "build", "deploy", "lint"}
		}
		if p.Ref != "main" || p.Sha != sha || p.Source != "api" || !slices.Equal(jobNames(p), want) {
			t.Errorf("%s: pipeline on %q at %s (%s) with jobs %v, want main at %s (api) with %v", c.name, p.Ref, p.Sha, p.Source, jobNames(p), sha, want)
		}
		var vars []api.PipelineVariableValue
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/variables", project.ID, p.ID), nil, &vars)
		if !slices.Equal(vars, c.wantVars) {
			t.Errorf("%s: variables %+v, want %+v", c.name, vars, c.wantVars)
		}
	}

	// The posted-YAML form is unchanged.
	resp, b := inst.Do(t, "POST", path+"?ref=main", "posted: {script: x}\n", "Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if p := decode[api.Pipeline](t, b); !slices.Equal(jobNames(p), []string{"posted"}) {
		t.Errorf("posted YAML: jobs %v", jobNames(p))
	}

	count := func() int { return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines") }
	before := count()
	filePart, fileType := multipartBody(t, [2]string{"ref", "main"}, [2]string{"@variables[][value]", "x"})
	for _, c := range []struct {
		name  string
		body  []byte
		ctype string
		want  string
	}{
		{"no ref", []byte("variables[][key]=A&variables[][value]=x"), urlencoded, "ref is missing"},
		{"a definition field", []byte("ref=main&jobs=a"), urlencoded, `"jobs"`},
		{"a trigger's variable form", []byte("ref=main&variables[A]=x"), urlencoded, "variables[][key]"},
		{"a variable without a key", []byte("ref=main&variables[][value]=x"), urlencoded, "variables[][key]"},
		{"a bad variable type", []byte("ref=main&variables[][key]=A&variables[][variable_type]=blob"), urlencoded, "variable_type"},
		{"a bad variable name", []byte("ref=main&variables[][key]=A-B&variables[][value]=x"), urlencoded, "A-B"},
		{"malformed escape", []byte("ref=ma%zzin"), urlencoded, "malformed"},
		{"a file part", filePart, fileType, "is a file"},
		{"multipart without boundary", []byte("x"), "multipart/form-data", "boundary"},
		{"unknown ref", []byte("ref=nope"), urlencoded, `"nope"`},
	} {
		resp, b := inst.Do(t, "POST", path, c.body, "Content-Type", c.ctype)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q does not say %q", c.name, msg, c.want)
		}
	}
	if after := count(); after != before {
		t.Errorf("refused forms wrote %d pipelines", after-before)
	}

	// The trigger endpoint's variables are GitLab's hash (variables[KEY]=value); the
	// pipeline API's array form is a 400 there, not a variable named "][key".
	var trig api.Trigger
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/triggers", project.ID), map[string]any{"description": "ci"}, &trig)
	resp, b = jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/trigger/pipeline", project.ID),
		url.Values{"token": {trig.Token}, "ref": {"main"}, "variables[][key]": {"A"}}.Encode(), "Content-Type", urlencoded)
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "variables[KEY]") {
		t.Errorf("trigger with variables[][key]: %q", msg)
	}
}
