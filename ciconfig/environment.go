package ciconfig

import (
	"slices"
	"strconv"
	"strings"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig/expr"
	"github.com/jobapi/jobapi/environment"
	"github.com/jobapi/jobapi/gitref"
)

// envSpec is a job's `environment:` as the file writes it; the pipeline expands its name
// and url (GitLab expands them when it creates the pipeline, from the job's variables and
// the predefined ones).
type envSpec struct {
	name, url, action, onStop, tier string
	line, onStopLine, urlLine       int
}

var environmentKeys = []string{"name", "url", "action", "on_stop", "deployment_tier"}

// environmentUnsupported: keys of `environment:` jobapi refuses, naming them.
var environmentUnsupported = map[string]string{
	"auto_stop_in": " (environments are not stopped on a timer)",
	"kubernetes":   "",
}

// parseEnvironment reads `environment: name` or `environment: {name, url, action,
// on_stop, deployment_tier}` (GitLab's Entry::Environment).
func parseEnvironment(v *val, job string) (*envSpec, error) {
	const key = "environment"
	if v.kind == vString {
		if v.text == "" {
			return nil, errAt(v, job, key, "name can't be blank")
		}
		return &envSpec{name: v.text, action: "start", line: v.line}, nil
	}
	if v.kind != vMap {
		return nil, errAt(v, job, key, "config should be a hash or a string")
	}
	if err := checkKeys(v, job, key, environmentKeys, environmentUnsupported); err != nil {
		return nil, err
	}
	e := &envSpec{action: "start", line: v.line}
	str := func(k string) (string, error) {
		x := v.get(k)
		if x == nil || x.kind == vNull {
			return "", nil
		}
		return stringValue(x, job, key+":"+k)
	}
	var err error
	if e.name, err = str("name"); err != nil {
		return nil, err
	}
	if e.name == "" {
		return nil, errAt(v, job, key, "name can't be blank")
	}
	if e.url, err = str("url"); err != nil {
		return nil, err
	}
	if e.url != "" {
		e.urlLine = v.get("url").line
	}
	if len(e.url) > 255 {
		return nil, errAt(v.get("url"), job, key+":url", "is too long (maximum is 255 characters)")
	}
	// A url without variables is checked as written; one with them once expanded (expand).
	if e.url != "" && !strings.ContainsAny(e.url, "$%") {
		if problem := environment.URLProblem(e.url); problem != "" {
			return nil, errAt(v.get("url"), job, key+":url", "%s", problem)
		}
	}
	if a, err := str("action"); err != nil {
		return nil, err
	} else if a != "" {
		if !slices.Contains(environment.Actions, a) {
			return nil, errAt(v.get("action"), job, key+":action", "should be one of: %s", strings.Join(environment.Actions, ", "))
		}
		e.action = a
	}
	if e.onStop, err = str("on_stop"); err != nil {
		return nil, err
	}
	if e.onStop != "" {
		e.onStopLine = v.get("on_stop").line
	}
	if e.tier, err = str("deployment_tier"); err != nil {
		return nil, err
	}
	if e.tier != "" && !slices.Contains(environment.Tiers, e.tier) {
		return nil, errAt(v.get("deployment_tier"), job, key+":deployment_tier", "should be one of: %s", strings.Join(environment.Tiers, ", "))
	}
	return e, nil
}

// checkOnStop checks each on_stop as GitLab's YamlProcessor does: it names a job of the
// file whose environment has the same (unexpanded) name and action: stop.
func (cfg *config) checkOnStop() error {
	byName := make(map[string]*jobSpec, len(cfg.jobs))
	for _, j := range cfg.jobs {
		byName[j.name] = j
	}
	for _, j := range cfg.jobs {
		if j.env == nil || j.env.onStop == "" {
			continue
		}
		stop, ok := byName[j.env.onStop]
		fail := func(msg string) error {
			return &Error{Line: j.env.onStopLine, Job: j.name, Key: "environment:on_stop", Message: "job " + j.env.onStop + " " + msg}
		}
		switch {
		case !ok:
			return fail("is not defined")
		case stop.env == nil:
			return fail("does not have environment defined")
		case stop.env.name != j.env.name:
			return fail("has a different environment name")
		case stop.env.action != "stop":
			return fail("needs to have action stop defined")
		}
	}
	return nil
}

// expand is the environment as the pipeline creates it: name and url expanded with
// GitLab's ExpandVariables.expand (an undefined variable becomes empty), the slug and the
// tier derived from the expanded name. The url also sees CI_ENVIRONMENT_NAME and
// CI_ENVIRONMENT_SLUG, as GitLab's does.
func (e *envSpec) expand(job string, vars expr.Lookup) (*builds.Environment, error) {
	out := &builds.Environment{Action: e.action, OnStop: e.onStop, Tier: e.tier}
	out.Name = expandVariables(e.name, vars)
	if problem := environment.NameProblem(out.Name); problem != "" {
		return nil, &Error{Line: e.line, Job: job, Key: "environment:name",
			Message: "expands to " + strconv.Quote(out.Name) + ", which " + problem}
	}
	out.Slug = environment.Slug(out.Name)
	if out.Tier == "" {
		out.Tier = environment.GuessTier(out.Name)
	}
	out.URL = expandVariables(e.url, func(name string) (string, bool) {
		switch name {
		case "CI_ENVIRONMENT_NAME":
			return out.Name, true
		case "CI_ENVIRONMENT_SLUG":
			return out.Slug, true
		case "CI_ENVIRONMENT_TIER":
			return out.Tier, true
		case "CI_ENVIRONMENT_ACTION":
			return out.Action, true
		}
		return vars(name)
	})
	if out.URL != "" {
		if problem := environment.URLProblem(out.URL); problem != "" {
			return nil, &Error{Line: e.urlLine, Job: job, Key: "environment:url",
				Message: "expands to " + strconv.Quote(out.URL) + ", which " + problem}
		}
	}
	return out, nil
}

// expandVariables replaces $NAME, ${NAME} and %NAME% with their values, an undefined one
// with nothing (GitLab's ExpandVariables.expand; tags use expand_existing instead).
func expandVariables(s string, vars expr.Lookup) string {
	if !strings.ContainsAny(s, "$%") {
		return s
	}
	return tagVariable.ReplaceAllStringFunc(s, func(m string) string {
		sub := tagVariable.FindStringSubmatch(m)
		v, _ := vars(sub[1] + sub[2] + sub[3])
		return v
	})
}

// predefinedForEnvironment adds to a job's lookup the predefined variables GitLab knows
// at pipeline creation and that environment names commonly use.
func predefinedForEnvironment(vars expr.Lookup, jobName string) expr.Lookup {
	return func(name string) (string, bool) {
		if v, ok := vars(name); ok {
			return v, true
		}
		switch name {
		case "CI_COMMIT_REF_SLUG":
			ref, ok := vars("CI_COMMIT_REF_NAME")
			return gitref.Slug(ref), ok
		case "CI_COMMIT_SHORT_SHA":
			sha, ok := vars("CI_COMMIT_SHA")
			return sha[:min(8, len(sha))], ok
		case "CI_JOB_NAME_SLUG":
			return gitref.Slug(jobName), true
		}
		return "", false
	}
}

// expandResourceGroup is a job's resource_group as the pipeline creates it: expanded as
// GitLab's Seed::Processable::ResourceGroup does (ExpandVariables.expand with the job's
// variables, CI_ENVIRONMENT_NAME and _SLUG of its expanded environment included). A key
// that expands to nothing names no group, as GitLab skips a blank one; one GitLab would not
// store is a 400.
func expandResourceGroup(j *jobSpec, env *builds.Environment, vars expr.Lookup) (string, error) {
	key := expandVariables(j.resourceGroup, func(name string) (string, bool) {
		if env != nil {
			switch name {
			case "CI_ENVIRONMENT_NAME":
				return env.Name, true
			case "CI_ENVIRONMENT_SLUG":
				return env.Slug, true
			case "CI_ENVIRONMENT_TIER":
				return env.Tier, true
			case "CI_ENVIRONMENT_ACTION":
				return env.Action, true
			}
		}
		return vars(name)
	})
	if strings.TrimSpace(key) == "" {
		return "", nil
	}
	if problem := builds.ResourceGroupKeyProblem(key); problem != "" {
		return "", &Error{Line: j.resourceGroupLine, Job: j.name, Key: "resource_group",
			Message: "expands to " + strconv.Quote(key) + ", which " + problem}
	}
	return key, nil
}
