package ciconfig

import (
	"slices"
	"strings"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig/expr"
)

var (
	ruleWhen         = []string{builds.WhenOnSuccess, builds.WhenOnFailure, builds.WhenAlways, builds.WhenNever, builds.WhenManual, builds.WhenDelayed}
	workflowRuleWhen = []string{builds.WhenAlways, builds.WhenNever}
	// GitLab's Entry::AutoCancel values, in its order (the messages list them so).
	onNewCommitValues  = []string{builds.AutoCancelConservative, builds.AutoCancelInterruptible, builds.AutoCancelNone}
	onJobFailureValues = []string{builds.AutoCancelNone, builds.AutoCancelAll}
)

// parseAutoCancel reads workflow:auto_cancel or a workflow rule's auto_cancel:
// {on_new_commit, on_job_failure}; an absent key stays "" (not set here).
func parseAutoCancel(v *val, key string) (builds.AutoCancel, error) {
	var a builds.AutoCancel
	if v.kind != vMap {
		return a, errAt(v, "", key, "config should be a hash")
	}
	if err := checkKeys(v, "", key, []string{"on_new_commit", "on_job_failure"}, nil); err != nil {
		return a, err
	}
	read := func(name, what string, values []string) (string, error) {
		x := v.get(name)
		if x == nil || x.kind == vNull {
			return "", nil
		}
		if x.kind != vString || !slices.Contains(values, x.text) {
			return "", errAt(x, "", key, "%s must be one of: %s", what, strings.Join(values, ", "))
		}
		return x.text, nil
	}
	var err error
	if a.OnNewCommit, err = read("on_new_commit", "on new commit", onNewCommitValues); err != nil {
		return a, err
	}
	a.OnJobFailure, err = read("on_job_failure", "on job failure", onJobFailureValues)
	return a, err
}

// over returns a with the keys b sets replacing a's (a matching workflow rule's auto_cancel
// over workflow:auto_cancel).
func over(a, b builds.AutoCancel) builds.AutoCancel {
	if b.OnNewCommit != "" {
		a.OnNewCommit = b.OnNewCommit
	}
	if b.OnJobFailure != "" {
		a.OnJobFailure = b.OnJobFailure
	}
	return a
}

// parseRules reads `rules:` (a list of hashes, lists nested by !reference flattened up
// to 10 levels) of a job, or of the workflow when workflow is set.
func parseRules(v *val, job, key string, workflow bool) ([]rule, error) {
	if v.kind != vSeq {
		return nil, errAt(v, job, key, "config should be an array of hashes")
	}
	var items []*val
	var flatten func(s *val, level int) error
	flatten = func(s *val, level int) error {
		if level > maxScriptNesting {
			return errAt(s, job, key, "config should be an array of hashes nested at most %d levels", maxScriptNesting)
		}
		for _, item := range s.vals {
			switch item.kind {
			case vSeq:
				if err := flatten(item, level+1); err != nil {
					return err
				}
			case vMap:
				items = append(items, item)
			default:
				return errAt(item, job, key, "config should be an array of hashes")
			}
		}
		return nil
	}
	if err := flatten(v, 1); err != nil {
		return nil, err
	}
	out := make([]rule, 0, len(items))
	for _, item := range items {
		r, err := parseRule(item, job, key+":rule", workflow)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRule(v *val, job, key string, workflow bool) (rule, error) {
	allowed := []string{"if", "changes", "exists", "when", "allow_failure", "variables", "start_in", "needs", "interruptible"}
	whens := ruleWhen
	if workflow {
		allowed, whens = []string{"if", "changes", "exists", "when", "variables", "auto_cancel"}, workflowRuleWhen
	}
	if err := checkKeys(v, job, key, allowed, nil); err != nil {
		return rule{}, err
	}
	r := rule{line: v.line}
	var err error
	if x := v.get("auto_cancel"); x != nil && x.kind != vNull {
		if r.autoCancel, err = parseAutoCancel(x, key+":auto_cancel"); err != nil {
			return rule{}, err
		}
	}
	if x := v.get("if"); x != nil && x.kind != vNull {
		if x.kind != vString {
			return rule{}, errAt(x, job, key, "if should be a string")
		}
		if r.cond, err = expr.Parse(x.text); err != nil {
			return rule{}, errAt(x, job, key, "if invalid expression syntax (%s)", strings.TrimPrefix(err.Error(), "invalid expression syntax: "))
		}
	}
	if x := v.get("changes"); x != nil && x.kind != vNull {
		if r.changes, err = parseChanges(x, job, key+":changes"); err != nil {
			return rule{}, err
		}
	}
	if x := v.get("exists"); x != nil && x.kind != vNull {
		if r.exists, err = parseExists(x, job, key+":exists"); err != nil {
			return rule{}, err
		}
	}
	if x := v.get("when"); x != nil && x.kind != vNull {
		w, err := stringValue(x, job, key+":when")
		if err != nil || !slices.Contains(whens, w) {
			return rule{}, errAt(x, job, key, "when unknown value: %s (one of: %s)", x.text, strings.Join(whens, ", "))
		}
		r.when = w
	}
	if x := v.get("allow_failure"); x != nil && x.kind != vNull {
		b, err := boolValue(x, job, key+":allow_failure")
		if err != nil {
			return rule{}, err
		}
		r.allowFailure = &b
	}
	if x := v.get("interruptible"); x != nil && x.kind != vNull {
		b, err := boolValue(x, job, key+":interruptible")
		if err != nil {
			return rule{}, err
		}
		r.interruptible = &b
	}
	if x := v.get("variables"); x != nil && x.kind != vNull {
		if r.vars, err = parseVariables(x, job, key+":variables", false); err != nil {
			return rule{}, err
		}
	}
	startIn := v.get("start_in")
	switch {
	case r.when == builds.WhenDelayed:
		if startIn == nil || startIn.kind == vNull {
			return rule{}, errAt(v, job, key, "start_in should be a duration when when: delayed")
		}
		if r.startIn, err = durationSeconds(startIn, job, key+":start_in", maxStartIn, "1 week"); err != nil {
			return rule{}, err
		}
	case startIn != nil && startIn.kind != vNull:
		return rule{}, errAt(startIn, job, key, "start_in should be blank unless when: delayed")
	}
	if x := v.get("needs"); x != nil && x.kind != vNull {
		if r.needs, err = parseNeeds(x, job, key+":needs"); err != nil {
			return rule{}, err
		}
		r.hasNeeds = true
	}
	return r, nil
}

// readWorkflow reads workflow: {rules, auto_cancel}.
func (cfg *config) readWorkflow(v *val) error {
	if v == nil || v.kind == vNull {
		return nil
	}
	if v.kind != vMap {
		return errAt(v, "", "workflow", "config should be a hash")
	}
	if err := checkKeys(v, "", "workflow", []string{"rules", "auto_cancel"}, map[string]string{
		"name": " (pipeline names)",
	}); err != nil {
		return err
	}
	if x := v.get("auto_cancel"); x != nil && x.kind != vNull {
		a, err := parseAutoCancel(x, "workflow:auto_cancel")
		if err != nil {
			return err
		}
		cfg.autoCancel = a
	}
	if x := v.get("rules"); x != nil && x.kind != vNull {
		rules, err := parseRules(x, "", "workflow:rules", true)
		if err != nil {
			return err
		}
		cfg.workflow, cfg.hasWorkflow = rules, true
	}
	return nil
}

// match returns the first rule whose clauses all hold (if, then changes, then exists: the
// repository is read only for a rule whose if holds), or nil. job and key name the rules
// in messages.
func (f *repoFacts) match(rules []rule, vars expr.Lookup, job, key string) (*rule, error) {
	for i := range rules {
		ok, err := f.holds(&rules[i].clauses, vars, job, key, rules[i].line)
		if err != nil {
			return nil, err
		}
		if ok {
			return &rules[i], nil
		}
	}
	return nil, nil
}

// clauses are the conditions of a rule (of a job, the workflow or an include).
type clauses struct {
	cond    *expr.Expr // nil: no if
	changes *changesClause
	exists  *existsClause
}

func (f *repoFacts) holds(c *clauses, vars expr.Lookup, job, key string, line int) (bool, error) {
	if c.cond != nil && !c.cond.Eval(vars) {
		return false, nil
	}
	if c.changes != nil {
		if ok, err := f.changesHold(c.changes, vars, job, key+":changes", line); err != nil || !ok {
			return false, err
		}
	}
	if c.exists != nil {
		if ok, err := f.existsHolds(c.exists, vars, job, key+":exists", line); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}
