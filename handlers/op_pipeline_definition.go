// Operator API: the JSON body of POST /projects/:id/pipeline, which takes a member's personal
// access token, or an administrator's (or the admin token), in PRIVATE-TOKEN or Authorization:
// Bearer; each route's action (h.can in routes.go) decides by the caller's role
// (builds/access).

package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
)

// pipelineRequest is the body of POST /projects/:id/pipeline, with .gitlab-ci.yml's
// spellings: script as a string or a list, retry as a number or {max, when}, timeout as
// seconds or a duration ("1h 30m"), variables as strings or {value, masked}.
type pipelineRequest struct {
	Ref             string       `json:"ref"`
	Sha             string       `json:"sha"`
	Stages          []string     `json:"stages"`
	TimeoutStrategy string       `json:"timeout_strategy"`
	Jobs            []jobRequest `json:"jobs"`
	pipelineOrigin
	// CIConfig is the .gitlab-ci.yml text: the pipeline is compiled from it instead of
	// Stages and Jobs.
	CIConfig *string `json:"ci_config"`
}

// pipelineOrigin is what started a pipeline, in every form of POST …/pipeline: GitLab's
// `variables` (its API takes only ref and variables), and as jobapi's own additions the
// `source` (CI_PIPELINE_SOURCE, default api) and `before_sha` (CI_COMMIT_BEFORE_SHA), for a
// caller that creates pipelines on pushes.
type pipelineOrigin struct {
	BeforeSha string            `json:"before_sha"`
	Source    string            `json:"source"`
	Variables pipelineVariables `json:"variables"`
}

func (o pipelineOrigin) apply(d *builds.PipelineDefinition) {
	d.BeforeSHA, d.Source, d.Variables = o.BeforeSha, o.Source, o.Variables
}

type jobRequest struct {
	Name         string                   `json:"name"`
	Stage        string                   `json:"stage"`
	Script       stringList               `json:"script"`
	AfterScript  stringList               `json:"after_script"`
	Tags         []string                 `json:"tags"`
	Variables    map[string]variableValue `json:"variables"`
	Timeout      timeoutValue             `json:"timeout"`
	Retry        retryValue               `json:"retry"`
	AllowFailure allowFailureValue        `json:"allow_failure"`
	Image        string                   `json:"image"`
	Services     []string                 `json:"services"`
	// Needs, When and StartIn as in .gitlab-ci.yml: needs: [] (present, empty) starts the
	// job at once, an absent needs keeps stage order.
	Needs   *needList    `json:"needs"`
	When    string       `json:"when"`
	StartIn startInValue `json:"start_in"`
}

func (p pipelineRequest) definition(projectID int64) builds.PipelineDefinition {
	d := builds.PipelineDefinition{ProjectID: projectID, Ref: p.Ref, SHA: p.Sha, Stages: p.Stages,
		TimeoutStrategy: p.TimeoutStrategy, Jobs: make([]builds.JobDefinition, len(p.Jobs))}
	p.pipelineOrigin.apply(&d)
	for i, j := range p.Jobs {
		keys := make([]string, 0, len(j.Variables))
		for k := range j.Variables {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		vars := make([]builds.Variable, 0, len(keys))
		for _, k := range keys {
			v := j.Variables[k]
			vars = append(vars, builds.Variable{Key: k, Value: v.Value, Masked: v.Masked, File: v.File})
		}
		d.Jobs[i] = builds.JobDefinition{Name: j.Name, Stage: j.Stage, Script: j.Script, AfterScript: j.AfterScript,
			Tags: j.Tags, Variables: vars, TimeoutSeconds: int(j.Timeout), Retry: builds.RetryRule(j.Retry),
			AllowFailure: j.AllowFailure.Allowed, AllowFailureExitCodes: j.AllowFailure.ExitCodes,
			Image: builds.Image{Name: j.Image}, When: j.When, StartInSeconds: int(j.StartIn)}
		if j.Needs != nil {
			d.Jobs[i].Needs, d.Jobs[i].NeedsDeclared = []builds.Need(*j.Needs), true
		}
		if j.When == builds.WhenManual && !j.AllowFailure.Set {
			// GitLab: a manual job is optional (allow_failure: true) unless it says otherwise.
			d.Jobs[i].AllowFailure = true
		}
		for _, s := range j.Services {
			d.Jobs[i].Services = append(d.Jobs[i].Services, builds.Image{Name: s})
		}
	}
	return d
}

type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("script must be a string or a list of strings")
	}
	*s = list
	return nil
}

// pipelineVariables are a pipeline's own variables: GitLab's list
// [{"key", "value", "variable_type": "env_var"|"file"}], or a map {"KEY": "value"}.
type pipelineVariables []builds.Variable

func (pv *pipelineVariables) UnmarshalJSON(b []byte) error {
	var list []json.RawMessage
	if err := json.Unmarshal(b, &list); err == nil {
		out := make(pipelineVariables, 0, len(list))
		for _, raw := range list {
			var v struct {
				Key          *string `json:"key"`
				Value        *string `json:"value"`
				VariableType string  `json:"variable_type"`
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil || v.Key == nil || v.Value == nil {
				return fmt.Errorf("a pipeline variable must be {\"key\": ..., \"value\": ..., \"variable_type\": \"env_var\" or \"file\"}")
			}
			switch v.VariableType {
			case "", builds.VariableEnv, builds.VariableFile:
			default:
				return fmt.Errorf("pipeline variable %.60q: variable_type must be env_var or file", *v.Key)
			}
			out = append(out, builds.Variable{Key: *v.Key, Value: *v.Value, File: v.VariableType == builds.VariableFile})
		}
		*pv = out
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("variables must be a list of {\"key\", \"value\", \"variable_type\"} or an object of names to values")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(pipelineVariables, 0, len(keys))
	for _, k := range keys {
		var s string
		var n json.Number
		switch {
		case string(bytes.TrimSpace(m[k])) == "null":
			return fmt.Errorf("pipeline variable %.60q must be a string or a number", k)
		case json.Unmarshal(m[k], &s) == nil:
		case json.Unmarshal(m[k], &n) == nil:
			s = n.String()
		default:
			return fmt.Errorf("pipeline variable %.60q must be a string or a number", k)
		}
		out = append(out, builds.Variable{Key: k, Value: s})
	}
	*pv = out
	return nil
}

type variableValue struct {
	Value  string
	Masked bool
	File   bool
}

func (v *variableValue) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v.Value = s
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v.Value = n.String()
		return nil
	}
	var obj struct {
		Value  *string `json:"value"`
		Masked bool    `json:"masked"`
		File   bool    `json:"file"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil || obj.Value == nil {
		return fmt.Errorf("a variable must be a string, a number or {\"value\": ..., \"masked\": bool}")
	}
	v.Value, v.Masked, v.File = *obj.Value, obj.Masked, obj.File
	return nil
}

// timeoutValue is a job timeout in seconds.
type timeoutValue int

func (t *timeoutValue) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		if n <= 0 {
			return fmt.Errorf("timeout must be positive")
		}
		*t = timeoutValue(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("timeout must be seconds or a duration such as \"1h 30m\"")
	}
	if secs, err := strconv.Atoi(s); err == nil && secs > 0 {
		*t = timeoutValue(secs)
		return nil
	}
	d, err := time.ParseDuration(strings.ReplaceAll(s, " ", ""))
	if err != nil || d < time.Second {
		return fmt.Errorf("timeout %.40q is not a duration such as \"1h 30m\"", s)
	}
	*t = timeoutValue(d / time.Second)
	return nil
}

// retryValue is `retry: 2` or `retry: {max: 2, when: [script_failure]}`.
type retryValue builds.RetryRule

func (r *retryValue) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*r = retryValue{Max: n}
		return nil
	}
	var obj struct {
		Max  int             `json:"max"`
		When json.RawMessage `json:"when"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("retry must be a number or {\"max\": n, \"when\": [reasons]}")
	}
	*r = retryValue{Max: obj.Max}
	if len(obj.When) > 0 {
		var when stringList
		if err := json.Unmarshal(obj.When, &when); err != nil {
			return fmt.Errorf("retry.when must be a reason or a list of reasons")
		}
		r.When = when
	}
	return nil
}

// allowFailureValue is `allow_failure: true` or `allow_failure: {exit_codes: [137, 255]}`
// (or a single code), GitLab's two forms.
type allowFailureValue struct {
	Allowed   bool
	ExitCodes []int
	Set       bool // present in the request
}

func (a *allowFailureValue) UnmarshalJSON(b []byte) error {
	a.Set = true
	if err := json.Unmarshal(b, &a.Allowed); err == nil {
		return nil
	}
	var obj struct {
		ExitCodes json.RawMessage `json:"exit_codes"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil || len(obj.ExitCodes) == 0 {
		return fmt.Errorf("allow_failure must be true, false or {\"exit_codes\": [codes]}")
	}
	var one int
	if err := json.Unmarshal(obj.ExitCodes, &one); err == nil {
		a.ExitCodes = []int{one}
		return nil
	}
	if err := json.Unmarshal(obj.ExitCodes, &a.ExitCodes); err != nil || len(a.ExitCodes) == 0 {
		return fmt.Errorf("allow_failure.exit_codes must be an exit code or a list of them")
	}
	return nil
}

// needList is `needs: [a, {job: b, optional: true}]`: names or objects.
type needList []builds.Need

func (n *needList) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("needs must be a list of job names or {\"job\": name} objects")
	}
	out := make(needList, 0, len(raw))
	for _, r := range raw {
		var name string
		if err := json.Unmarshal(r, &name); err == nil {
			out = append(out, builds.Need{Job: name, Artifacts: true})
			continue
		}
		obj := struct {
			Job       *string `json:"job"`
			Artifacts *bool   `json:"artifacts"`
			Optional  bool    `json:"optional"`
		}{}
		dec := json.NewDecoder(strings.NewReader(string(r)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&obj); err != nil || obj.Job == nil {
			return fmt.Errorf("each need must be a job name or {\"job\": name, \"artifacts\": bool, \"optional\": bool}")
		}
		need := builds.Need{Job: *obj.Job, Artifacts: obj.Artifacts == nil || *obj.Artifacts, Optional: obj.Optional}
		out = append(out, need)
	}
	*n = out
	return nil
}

// startInValue is a delayed job's start_in in seconds: a number of seconds, or a duration
// as GitLab writes it ("30 minutes", "1 day", "1h 30m"), read as the YAML compiler reads it.
type startInValue int

func (v *startInValue) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*v = startInValue(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("start_in must be seconds or a duration such as \"30 minutes\"")
	}
	secs, err := ciconfig.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("start_in %.40q is not a duration such as \"30 minutes\"", s)
	}
	*v = startInValue(secs)
	return nil
}
