package handlers

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// Every decoder must answer any input with a value or a client error: never a panic, never
// a definition that passes validation yet breaks the limits it promises.

func jsonRequest(body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// clientError reports whether err is one the handlers answer with a 4xx.
func clientError(err error) bool {
	var he *httpError
	var tooBig *http.MaxBytesError
	return errors.As(err, &he) && he.code >= 400 && he.code < 500 || errors.As(err, &tooBig)
}

func FuzzDecodeRunnerRequests(f *testing.F) {
	f.Add([]byte(`{"token":"glrt-abcdefghijklmnop","system_id":"s_0123456789ab","info":{"features":{"two_phase_job_commit":true}}}`))
	f.Add([]byte(`{"token":1}`))
	f.Add([]byte(`{"info":{"features":{"x":"y"}}}`))
	f.Add([]byte(`{"state":"running","exit_code":1,"output":{"checksum":"crc32:01234567","bytesize":3}}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&api.VerifyRequest{}, &api.JobRequest{}, &api.UpdateJobRequest{}, &jobUpdateFields{}} {
			if err := decodeJSON(jsonRequest(body), v, false); err != nil && !clientError(err) {
				t.Fatalf("decode %T: %v is not a client error", v, err)
			}
		}
		// The job request's path: features parsed apart, and cached. Whatever the full
		// decode accepts, the split one accepts with the same features, twice.
		var full api.JobRequest
		fullErr := decodeJSON(jsonRequest(body), &full, false)
		var split jobRequestFields
		err := decodeJSON(jsonRequest(body), &split, false)
		var sets featureSets
		for i := 0; i < 2 && err == nil; i++ {
			var p parsedFeatures
			if p, err = sets.parse(split.Info.Features); err == nil && fullErr == nil &&
				(len(p.all) != len(full.Info.Features) || p.twoPhase != full.Info.Features["two_phase_job_commit"]) {
				t.Fatalf("features %v parsed apart as %v", full.Info.Features, p.all)
			}
		}
		if err != nil && !clientError(err) {
			t.Fatalf("job request: %v is not a client error", err)
		}
		if (err == nil) != (fullErr == nil) {
			t.Fatalf("job request: split decode says %v, full decode %v", err, fullErr)
		}
	})
}

func FuzzPipelineDefinition(f *testing.F) {
	f.Add([]byte(`{"stages":["build","test"],"jobs":[{"name":"a","stage":"build","script":"make","retry":2,"timeout":"1h 30m","variables":{"GIT_STRATEGY":"none","N":3,"S":{"value":"x","masked":true}}}]}`))
	f.Add([]byte(`{"jobs":[{"name":"b","script":["true"],"retry":{"max":1,"when":"script_failure"},"tags":["x"]}]}`))
	f.Add([]byte(`{"jobs":[{"name":"","script":[]}]}`))
	f.Add([]byte(`{"jobs":[{"name":"c","script":"x","timeout":-5}]}`))
	f.Add([]byte(`{"sha":"zz","jobs":null}`))
	f.Add([]byte(`{"source":"push","before_sha":"0123456789abcdef0123456789abcdef01234567","variables":[{"key":"A","value":"1","variable_type":"file"}],"jobs":[{"name":"a","script":"x"}]}`))
	f.Add([]byte(`{"variables":{"A":"1","B":2,"A":"3"},"jobs":[{"name":"a","script":"x"}]}`))
	f.Add([]byte(`{"variables":[{"key":"A"}],"source":"cron","jobs":[{"name":"a","script":"x"}]}`))
	f.Add([]byte(`{"stages":["a","b"],"jobs":[{"name":"x","stage":"a","script":"x","when":"delayed","start_in":"2 hours"},{"name":"y","stage":"b","script":"y","needs":["x",{"job":"x","optional":true}],"allow_failure":{"exit_codes":[1]}}]}`))
	f.Add([]byte(`{"jobs":[{"name":"m","script":"x","when":"manual","needs":[]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req pipelineRequest
		if err := decodeJSON(jsonRequest(body), &req, true); err != nil {
			if !clientError(err) {
				t.Fatalf("decode: %v is not a client error", err)
			}
			return
		}
		d := req.definition(1)
		err := d.Normalize()
		var verr *builds.ValidationError
		if err != nil {
			if !errors.As(err, &verr) || verr.Msg == "" {
				t.Fatalf("Normalize: %v is not a validation error with a message", err)
			}
			return
		}
		// What passes must respect the promised limits.
		if len(d.Jobs) == 0 || len(d.Jobs) > builds.MaxJobsPerPipeline || len(d.Stages) == 0 {
			t.Fatalf("accepted a definition with %d jobs and %d stages", len(d.Jobs), len(d.Stages))
		}
		for _, j := range d.Jobs {
			if j.Name == "" || len(j.Script) == 0 || j.TimeoutSeconds <= 0 || d.StageIndex(j.Stage) < 0 {
				t.Fatalf("accepted an invalid job %+v", j)
			}
		}
		if !slices.Contains(builds.Sources, d.Source) || len(d.BeforeSHA) != 40 || len(d.Variables) > builds.MaxVariables {
			t.Fatalf("accepted source %q, before_sha %q, %d variables", d.Source, d.BeforeSHA, len(d.Variables))
		}
		keys := map[string]bool{}
		for _, v := range d.Variables {
			if v.Key == "" || keys[v.Key] || v.Masked {
				t.Fatalf("accepted pipeline variables %+v", d.Variables)
			}
			keys[v.Key] = true
		}
	})
}

func FuzzParseContentRange(f *testing.F) {
	f.Add("0-9", 10)
	f.Add("10-19", 10)
	f.Add("bytes 0-0", 1)
	f.Add("5-3", 0)
	f.Add("", 3)
	f.Add("999999999999999-999999999999999", 1)
	f.Add("-1-2", 4)
	f.Fuzz(func(t *testing.T, header string, n int) {
		if n < 0 || n > 1<<21 {
			return
		}
		start, err := ParseContentRange(header, n)
		if err != nil {
			return
		}
		if start < 0 {
			t.Fatalf("ParseContentRange(%q, %d) = %d, a negative offset", header, n, start)
		}
	})
}

func FuzzFeatureChange(f *testing.F) {
	f.Add("application/json", `{"value":true,"project":"1"}`)
	f.Add("application/json", `{"value":25,"key":"percentage_of_actors"}`)
	f.Add("application/x-www-form-urlencoded", "value=false&runner=3")
	f.Add("application/x-www-form-urlencoded", "value=101")
	f.Add("application/json", `{"value":[1]}`)
	f.Fuzz(func(t *testing.T, contentType, body string) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		c, err := decodeFeatureChange(r)
		if err != nil {
			if !clientError(err) {
				t.Fatalf("decodeFeatureChange: %v is not a client error", err)
			}
			return
		}
		if (c.Boolean == nil) == (c.Percentage == nil) {
			t.Fatalf("accepted a change with neither or both of value kinds: %+v", c)
		}
		if c.Percentage != nil && (*c.Percentage < 0 || *c.Percentage > 100) {
			t.Fatalf("accepted percentage %d", *c.Percentage)
		}
	})
}

func FuzzRunnerFields(f *testing.F) {
	f.Add("application/json", `{"description":"d","tag_list":["a"],"run_untagged":"true","paused":false}`)
	f.Add("application/json", `{"tag_list":"a, b,,c"}`)
	f.Add("application/x-www-form-urlencoded", "tag_list=a,b&paused=yes&active=false")
	f.Add("application/x-www-form-urlencoded", "tag_list[]=a&tag_list[]=b")
	f.Fuzz(func(t *testing.T, contentType, body string) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		var h Handler
		fields, err := h.decodeRunnerFields(r)
		if err != nil {
			if !clientError(err) {
				t.Fatalf("decodeRunnerFields: %v is not a client error", err)
			}
			return
		}
		u, err := fields.update()
		if err != nil {
			if !clientError(err) {
				t.Fatalf("update: %v is not a client error", err)
			}
			return
		}
		if u.Tags != nil {
			for _, tag := range *u.Tags {
				if tag == "" || len(tag) > builds.MaxNameLength {
					t.Fatalf("accepted tag %q", tag)
				}
			}
		}
	})
}
