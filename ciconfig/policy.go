package ciconfig

import (
	"regexp"
	"strings"

	"github.com/jobapi/jobapi/ciconfig/expr"
)

// policy is one `only:` or `except:` of a job, GitLab's pre-rules syntax
// (lib/gitlab/ci/build/policy): an array is refs; a hash has refs and variables.
// `only` holds when every part given holds; `except` when any part does.
type policy struct {
	refs    []refPattern
	hasRefs bool
	vars    []*expr.Expr
	hasVars bool
	changes *changesClause // nil: not given
}

type refPattern struct {
	name string         // a keyword, a ref name, or the text of an invalid /regexp/
	re   *regexp.Regexp // a valid /regexp/
	path string         // after '@': the project the pattern is for (CI_PROJECT_PATH)
}

// defaultOnly is what GitLab gives a job with neither rules nor only (nor workflow:rules).
var defaultOnly = &policy{hasRefs: true, refs: []refPattern{{name: "branches"}, {name: "tags"}}}

var policyUnsupported = map[string]string{
	"kubernetes": ": jobapi has no Kubernetes integration",
}

func parsePolicy(v *val, job, key string) (*policy, error) {
	p := &policy{}
	var refs *val
	switch v.kind {
	case vSeq:
		refs = v
	case vMap:
		if len(v.keys) == 0 {
			return nil, errAt(v, job, key, "config can't be blank")
		}
		if err := checkKeys(v, job, key, []string{"refs", "variables", "changes"}, policyUnsupported); err != nil {
			return nil, err
		}
		refs = v.get("refs")
		if x := v.get("changes"); x != nil && x.kind != vNull {
			// GitLab takes an array of strings here (a string too, as Array(globs)), not
			// rules:changes' hash, and matches the globs as written.
			var paths []string
			var err error
			if x.kind == vString {
				paths = []string{x.text}
			} else if paths, err = stringList(x, job, key+":changes"); err != nil {
				return nil, err
			}
			p.changes = &changesClause{paths: paths, policy: true}
		}
		if x := v.get("variables"); x != nil && x.kind != vNull {
			list, err := stringList(x, job, key+":variables")
			if err != nil {
				return nil, err
			}
			for i, s := range list {
				e, err := expr.Parse(s)
				if err != nil {
					return nil, errAt(x.vals[i], job, key, "variables invalid expression syntax (%s)", strings.TrimPrefix(err.Error(), "invalid expression syntax: "))
				}
				p.vars = append(p.vars, e)
			}
			p.hasVars = true
		}
	default:
		return nil, errAt(v, job, key, "config has to be either an array of conditions or a hash")
	}
	if (refs == nil || refs.kind == vNull) && v.kind == vMap && key == "only" {
		// GitLab deep-merges a hash under only: over the default {refs: [branches, tags]}.
		p.refs, p.hasRefs = defaultOnly.refs, true
	}
	if refs != nil && refs.kind != vNull {
		list, err := stringList(refs, job, key+":refs")
		if err != nil {
			return nil, err
		}
		for _, s := range list {
			var r refPattern
			r.name, r.path, _ = strings.Cut(s, "@")
			// An invalid /regexp/ is compared as a plain name, as GitLab's fallback does.
			if strings.HasPrefix(r.name, "/") {
				r.re, _ = expr.CompileRegexp(r.name)
			}
			p.refs = append(p.refs, r)
		}
		p.hasRefs = true
	}
	return p, nil
}

// pipelineFacts is what ref patterns are matched against.
type pipelineFacts struct {
	ref         string
	tag, branch bool
	source      string // CI_PIPELINE_SOURCE without "_event", as GitLab compares it
	projectPath string
}

func factsOf(c Context, ctx map[string]string) pipelineFacts {
	source := ctx["CI_PIPELINE_SOURCE"]
	return pipelineFacts{
		ref: c.Ref, tag: c.RefIsTag,
		// GitLab: a merge request pipeline is neither a branch nor a tag pipeline.
		branch:      !c.RefIsTag && source != "merge_request_event" && source != "external_pull_request_event",
		source:      strings.TrimSuffix(source, "_event"),
		projectPath: ctx["CI_PROJECT_PATH"],
	}
}

// satisfied: for `only`, every part given holds; for `except` (except=true), some part
// does. Parts are answered in GitLab's order (refs, variables, changes) and the
// repository read only when the others did not decide already.
func (p *policy) satisfied(f pipelineFacts, vars expr.Lookup, repo *repoFacts, job, key string, except bool) (bool, error) {
	if p.hasRefs && p.refsMatch(f) == except {
		return except, nil
	}
	if p.hasVars {
		held := false
		for _, e := range p.vars {
			if e.Eval(vars) {
				held = true
				break
			}
		}
		if held == except {
			return except, nil
		}
	}
	if p.changes != nil {
		held, err := repo.changesHold(p.changes, vars, job, key+":changes", 0)
		if err != nil {
			return false, err
		}
		if held == except {
			return except, nil
		}
	}
	return !except, nil
}

func (p *policy) refsMatch(f pipelineFacts) bool {
	for _, r := range p.refs {
		if r.path != "" && r.path != f.projectPath {
			continue
		}
		switch {
		case r.name == "tags" && f.tag, r.name == "branches" && f.branch:
			return true
		case f.source != "" && (r.name == f.source || r.name == plural(f.source)):
			return true
		case !f.branch && !f.tag:
			// Names and regexps match only branch and tag pipelines.
		case r.re != nil:
			if r.re.MatchString(f.ref) {
				return true
			}
		case r.name == f.ref:
			return true
		}
	}
	return false
}

// plural is ActiveSupport's pluralize for the pipeline sources: push → pushes,
// schedule → schedules, merge_request → merge_requests, trigger → triggers.
func plural(s string) string {
	for _, end := range []string{"s", "sh", "ch", "x"} {
		if strings.HasSuffix(s, end) {
			return s + "es"
		}
	}
	return s + "s"
}
