package ciconfig

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig/expr"
)

// Context is what rules and workflow:rules see about the pipeline being created.
type Context struct {
	Ref      string // branch or tag name ("main", "v1.2.0"), never "refs/..."
	RefIsTag bool
	SHA      string
	// BeforeSHA: the ref's previous tip in a push pipeline (CI_COMMIT_BEFORE_SHA); "" or
	// zeros when there is none. rules:changes compare it with SHA.
	BeforeSHA     string `json:",omitempty"`
	DefaultBranch string
	Source        string // CI_PIPELINE_SOURCE: "api" (default), "push", "web", "trigger", "schedule", "merge_request_event"
	// Variables visible to rules:if and workflow:rules (predefined, project, pipeline; a
	// later entry wins). Compile adds CI_COMMIT_BRANCH/CI_COMMIT_TAG/CI_COMMIT_REF_NAME/
	// CI_PIPELINE_SOURCE/CI_DEFAULT_BRANCH/CI_COMMIT_SHA from the fields above when absent
	// (as GitLab: CI_COMMIT_BRANCH only in branch pipelines, not for tags nor merge requests).
	// They win over the file's variables in rules, as project and pipeline variables do
	// in GitLab.
	Variables []builds.Variable
	// Includes reads the files of `include:`; nil refuses them (400).
	Includes Includes `json:"-"`
	// Artifacts reads include: artifact files of a child pipeline (its parent's jobs'
	// archives); nil outside a child pipeline, which refuses them (GitLab's rule).
	Artifacts ArtifactFiles `json:"-"`
	// Repository answers changes and exists clauses; nil refuses those that are reached
	// (400).
	Repository Repository `json:"-"`
}

// Result is the pipeline a configuration gives for one Context.
type Result struct {
	// Stages: the stages that have jobs, in the file's order (.pre first, .post last), as
	// GitLab shows a pipeline's stages.
	Stages []string
	// Jobs: hidden jobs dropped, extends/default/!reference merged, rules applied (when:
	// never removes), parallel expanded, global variables under job variables; in stage
	// order, then file order. Needs and Dependencies name only jobs of this list.
	Jobs []builds.JobDefinition
	// AutoCancel: workflow:auto_cancel with the matching workflow rule's over it; ""
	// fields are GitLab's defaults (builds.PipelineDefinition fills them).
	AutoCancel builds.AutoCancel
	Warnings   []string
	MergedYAML string // the config after anchors, extends and !reference, as GitLab's lint shows it
}

// Compile turns .gitlab-ci.yml text into the jobs of a pipeline, as GitLab would for the
// Context. Every error about what the user wrote is an *Error; ErrFilteredOut when
// workflow:rules let no pipeline run, ErrNoJobs when rules left no job.
func Compile(src []byte, c Context) (Result, error) {
	cfg, err := load(src, c)
	if err != nil {
		return Result{}, err
	}
	return cfg.pipeline(c)
}

// lookupTable is the Context's variables with the ref's variables filled in.
func (c Context) lookupTable() map[string]string {
	m := make(map[string]string, len(c.Variables)+8)
	source := c.Source
	if source == "" {
		source = "api"
	}
	defaults := []builds.Variable{
		{Key: "CI_PIPELINE_SOURCE", Value: source},
		{Key: "CI_COMMIT_REF_NAME", Value: c.Ref},
		{Key: "CI_COMMIT_SHA", Value: c.SHA},
		{Key: "CI_DEFAULT_BRANCH", Value: c.DefaultBranch},
	}
	switch {
	case c.RefIsTag:
		defaults = append(defaults, builds.Variable{Key: "CI_COMMIT_TAG", Value: c.Ref})
	case source != "merge_request_event": // GitLab sets no CI_COMMIT_BRANCH in merge request pipelines
		defaults = append(defaults, builds.Variable{Key: "CI_COMMIT_BRANCH", Value: c.Ref})
	}
	for _, v := range defaults {
		if v.Value != "" {
			m[v.Key] = v.Value
		}
	}
	for _, v := range c.Variables {
		m[v.Key] = v.Value
	}
	return m
}

// varSet is an ordered set of variables where a later value of a key replaces the earlier
// one in its place.
type varSet struct {
	list []builds.Variable
	at   map[string]int
}

func (s *varSet) add(vs ...yamlVar) {
	if s.at == nil {
		s.at = make(map[string]int, len(vs))
	}
	for _, v := range vs {
		bv := builds.Variable{Key: v.key, Value: v.value, Raw: v.raw}
		if i, ok := s.at[v.key]; ok {
			s.list[i] = bv
			continue
		}
		s.at[v.key] = len(s.list)
		s.list = append(s.list, bv)
	}
}

func (cfg *config) pipeline(c Context) (Result, error) {
	ctx := c.lookupTable()
	// Global variables, with workflow:rules' variables over them.
	globals := slices.Clone(cfg.globals)
	autoCancel := cfg.autoCancel
	globalAt := func(name string) (string, bool) {
		for i := len(globals) - 1; i >= 0; i-- {
			if globals[i].key == name {
				return globals[i].value, true
			}
		}
		return "", false
	}
	if cfg.hasWorkflow {
		r, err := cfg.repo.match(cfg.workflow, func(name string) (string, bool) {
			if v, ok := ctx[name]; ok {
				return v, true
			}
			return globalAt(name)
		}, "", "workflow:rules:rule")
		if err != nil {
			return Result{}, err
		}
		if r == nil || r.when == builds.WhenNever {
			return Result{}, ErrFilteredOut
		}
		globals = append(globals, r.vars...)
		autoCancel = over(autoCancel, r.autoCancel)
	}
	var globalSet varSet
	globalSet.add(globals...)
	globalMap := make(map[string]string, len(globalSet.list))
	for _, v := range globalSet.list {
		globalMap[v.Key] = v.Value
	}

	type included struct {
		spec  *jobSpec
		def   builds.JobDefinition
		needs []needSpec
	}
	var kept []included
	present := make(map[string]bool, len(cfg.jobs))
	facts := factsOf(c, ctx)
	for _, j := range cfg.jobs {
		def := j.def
		needs := j.needs
		var ruleVars []yamlVar
		if j.only != nil || j.except != nil {
			vars := jobLookup(ctx, j, nil, globalMap)
			if j.only != nil {
				ok, err := j.only.satisfied(facts, vars, cfg.repo, j.name, "only", false)
				if err != nil {
					return Result{}, err
				}
				if !ok {
					continue
				}
			}
			if j.except != nil {
				ok, err := j.except.satisfied(facts, vars, cfg.repo, j.name, "except", true)
				if err != nil {
					return Result{}, err
				}
				if ok {
					continue
				}
			}
		}
		if j.hasRules {
			r, err := cfg.repo.match(j.rules, jobLookup(ctx, j, nil, globalMap), j.name, "rules:rule")
			if err != nil {
				return Result{}, err
			}
			if r == nil || r.when == builds.WhenNever {
				continue
			}
			def.When = j.staticWhen
			if r.when != "" {
				def.When = r.when
			}
			def.StartInSeconds = 0
			if def.When == builds.WhenDelayed {
				def.StartInSeconds = r.startIn
			}
			if r.allowFailure != nil {
				def.AllowFailure = *r.allowFailure
				def.AllowFailureExitCodes = nil
			}
			if r.interruptible != nil {
				def.Interruptible = *r.interruptible
			}
			if r.hasNeeds {
				needs = r.needs
				def.NeedsDeclared = true
			}
			ruleVars = r.vars
		}
		if len(def.Tags) > 0 {
			def.Tags = expandTags(def.Tags, jobLookup(ctx, j, ruleVars, globalMap))
		}
		if j.env != nil {
			env, err := j.env.expand(j.name, predefinedForEnvironment(jobLookup(ctx, j, ruleVars, globalMap), j.name))
			if err != nil {
				return Result{}, err
			}
			def.Environment = env
		}
		if j.resourceGroup != "" {
			key, err := expandResourceGroup(j, def.Environment, predefinedForEnvironment(jobLookup(ctx, j, ruleVars, globalMap), j.name))
			if err != nil {
				return Result{}, err
			}
			def.ResourceGroup = key
		}
		var vars varSet
		for _, g := range globals {
			if j.inheritVars == nil || j.inheritVars[g.key] {
				vars.add(g)
			}
		}
		vars.add(j.vars...)
		vars.add(ruleVars...)
		if len(vars.list) > builds.MaxVariables {
			return Result{}, &Error{Line: j.line, Job: j.name, Key: "variables",
				Message: fmt.Sprintf("the job has %d variables with the global ones; at most %d are accepted", len(vars.list), builds.MaxVariables)}
		}
		def.Variables = vars.list
		if j.cacheKeys != nil {
			def.Cache = slices.Clone(def.Cache)
			for i, k := range j.cacheKeys {
				if k == nil || i >= len(def.Cache) {
					continue
				}
				key, err := cfg.repo.cacheKey(k, i)
				if err != nil {
					return Result{}, err
				}
				def.Cache[i].Key = key
			}
		}
		kept = append(kept, included{spec: j, def: def, needs: needs})
		present[j.name] = true
	}
	if len(kept) == 0 {
		return Result{}, ErrNoJobs
	}

	// Stage order, then file order.
	stageIndex := make(map[string]int, len(cfg.stages))
	for i, s := range cfg.stages {
		stageIndex[s] = i
	}
	slices.SortStableFunc(kept, func(a, b included) int {
		return stageIndex[a.def.Stage] - stageIndex[b.def.Stage]
	})
	names := make([]string, len(kept))
	for i, k := range kept {
		names[i] = k.def.Name
	}

	res := Result{Warnings: append(slices.Clone(cfg.warnings), cfg.repo.warnings...), MergedYAML: cfg.merged, AutoCancel: autoCancel}
	res.Jobs = make([]builds.JobDefinition, len(kept))
	firstOfStage := 0
	for i, k := range kept {
		def := k.def
		if i > 0 && def.Stage != kept[i-1].def.Stage {
			firstOfStage = i
			res.Stages = append(res.Stages, def.Stage)
		} else if i == 0 {
			res.Stages = append(res.Stages, def.Stage)
		}
		def.Needs = nil
		for _, n := range k.needs {
			if !present[n.job] {
				if n.optional {
					continue
				}
				return Result{}, &Error{Line: n.line, Job: def.Name, Key: "needs",
					Message: fmt.Sprintf("'%s' job needs '%s' job, but '%s' is not in any previous stage", def.Name, n.job, n.job)}
			}
			def.Needs = append(def.Needs, builds.Need{Job: n.job, Artifacts: n.artifacts, Optional: n.optional})
		}
		switch {
		case k.spec.def.DependenciesDeclared:
			def.Dependencies = nil
			for _, d := range k.spec.deps {
				if present[d] {
					def.Dependencies = append(def.Dependencies, d)
				}
			}
		case def.NeedsDeclared:
			def.Dependencies = nil
			for _, n := range def.Needs {
				if n.Artifacts {
					def.Dependencies = append(def.Dependencies, n.Job)
				}
			}
		default:
			// Every job of the earlier stages: a prefix of names, shared (capacity
			// capped so that nobody's append can write into it).
			def.Dependencies = names[:firstOfStage:firstOfStage]
		}
		def.DependenciesDeclared = true
		res.Jobs[i] = def
	}
	if err := builds.ValidateNeeds(res.Stages, res.Jobs); err != nil {
		var ve *builds.ValidationError
		if errors.As(err, &ve) {
			return Result{}, &Error{Message: ve.Msg}
		}
		return Result{}, err
	}
	return res, nil
}

// jobLookup is what a job's rules:if (and its tags) see: the Context's variables, then the
// rule's, the job's own (matrix values included), the job's name and stage, and the
// global variables it inherits.
func jobLookup(ctx map[string]string, j *jobSpec, ruleVars []yamlVar, globals map[string]string) expr.Lookup {
	return func(name string) (string, bool) {
		if v, ok := ctx[name]; ok {
			return v, true
		}
		for _, list := range [][]yamlVar{ruleVars, j.vars} {
			for i := len(list) - 1; i >= 0; i-- {
				if list[i].key == name {
					return list[i].value, true
				}
			}
		}
		switch name {
		case "CI_JOB_NAME":
			return j.name, true
		case "CI_JOB_STAGE":
			return j.def.Stage, true
		}
		if j.inheritVars == nil || j.inheritVars[name] {
			v, ok := globals[name]
			return v, ok
		}
		return "", false
	}
}

// tagVariable is a variable in a tag: $NAME, ${NAME} or %NAME%.
var tagVariable = regexp.MustCompile(`\$([a-zA-Z_][a-zA-Z0-9_]*)|\$\{([a-zA-Z_][a-zA-Z0-9_]*)\}|%([a-zA-Z_][a-zA-Z0-9_]*)%`)

// expandTags expands variables in tags when the pipeline is created, as GitLab does
// (ExpandVariables.expand_existing): runners are matched on the expanded tags. A variable
// that is not defined stays as written. Tags left empty are dropped.
func expandTags(tags []string, vars expr.Lookup) []string {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if t = expandExisting(t, vars); t != "" {
			out = append(out, t)
		}
	}
	return out
}
