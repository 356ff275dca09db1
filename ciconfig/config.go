package ciconfig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// Top-level keys that are not jobs. The legacy globals (image, services, before_script,
// after_script, cache) are `default:` entries written at the top, as in GitLab.
var reservedTop = map[string]bool{
	"stages": true, "types": true, "default": true, "variables": true, "workflow": true,
	"image": true, "services": true, "before_script": true, "after_script": true, "cache": true,
	"include": true, "spec": true,
}

// Top-level keys jobapi refuses, naming them (not supported yet).
var unsupportedTop = map[string]string{
	"spec": " (the inputs header)",
}

// Keys a job may have.
var jobKeys = []string{"stage", "type", "script", "before_script", "after_script", "image", "services",
	"variables", "tags", "timeout", "retry", "allow_failure", "when", "start_in", "needs",
	"dependencies", "artifacts", "cache", "rules", "parallel", "extends", "inherit", "only", "except", "coverage", "interruptible", "environment",
	"resource_group", "trigger", "id_tokens"}

// GitLab job keys jobapi does not support yet: a 400 naming them, never dropped.
var jobUnsupported = map[string]string{
	"release":             "",
	"secrets":             "",
	"pages":               "",
	"hooks":               "",
	"identity":            "",
	"manual_confirmation": "",
	"run":                 " (CI steps)",
	"dast_configuration":  "",
	"publish":             "",
}

// Keys of `default:`, and those jobs inherit from it.
var (
	defaultKeys        = []string{"image", "services", "before_script", "after_script", "tags", "timeout", "retry", "cache", "artifacts", "interruptible", "id_tokens"}
	defaultUnsupported = map[string]string{"hooks": "", "identity": ""}
	legacyGlobals      = []string{"image", "services", "before_script", "after_script", "cache"}
)

var jobWhen = []string{builds.WhenOnSuccess, builds.WhenOnFailure, builds.WhenAlways, builds.WhenManual, builds.WhenDelayed}

// Limits GitLab sets on jobs: start_in at most a week; 50 needs (ci_needs_size_limit);
// parallel 1..200 (also the most matrix copies).
const (
	maxStartIn  = 7 * 24 * 3600
	maxNeeds    = 50
	maxParallel = 200
)

func isHidden(name string) bool { return strings.HasPrefix(name, ".") }

// config is a .gitlab-ci.yml checked as a whole, before any rule is evaluated.
type config struct {
	stages      []string
	globals     []yamlVar
	workflow    []rule
	hasWorkflow bool              // workflow:rules given
	autoCancel  builds.AutoCancel // workflow:auto_cancel ("" fields: not given)
	jobs        []*jobSpec
	instances   map[string][]string // a parallel job's name → its copies' names
	merged      string
	warnings    []string
	repo        *repoFacts // what changes and exists clauses read, for the load's Context
	included    []IncludedFile
}

// jobSpec is one job (one copy of a parallel job) as the file defines it.
type jobSpec struct {
	name, base string
	line       int
	def        builds.JobDefinition // the static fields
	vars       []yamlVar            // the job's own variables, then its matrix values
	// inheritVars: nil inherits every global variable, else only those named.
	inheritVars map[string]bool
	needs       []needSpec
	deps        []string
	depsLine    int
	rules       []rule
	hasRules    bool
	// only, except: the pre-rules syntax; nil when not given (only has GitLab's default
	// when neither rules nor workflow:rules are).
	only, except *policy
	staticWhen   string // the job's `when` (or on_success): what a rule without when gives
	env          *envSpec
	// resourceGroup: `resource_group:` as written ("" without one), expanded per pipeline.
	resourceGroup     string
	resourceGroupLine int
	// cacheKeys: per entry of def.Cache, its key:files or files_commits (nil for a key
	// given as text), computed from the repository for each pipeline.
	cacheKeys []*cacheKeySpec
}

type needSpec struct {
	job       string
	base      string // the job named in the file when parallel:matrix picked copies of it
	artifacts bool
	optional  bool
	line      int
}

type rule struct {
	clauses       // none given: the rule always matches
	when          string
	allowFailure  *bool
	interruptible *bool
	autoCancel    builds.AutoCancel // a workflow rule's auto_cancel
	startIn       int
	vars          []yamlVar
	needs         []needSpec
	hasNeeds      bool
	line          int
}

// load parses and checks the whole file with what it includes; only include:rules depend
// on the pipeline (the Context's variables).
func load(src []byte, c Context) (*config, error) {
	spent := &budget{}
	tree, err := parseYAML(src, spent)
	if err != nil {
		return nil, err
	}
	if tree.kind != vMap {
		return nil, &Error{Line: tree.line, Message: "Invalid configuration format: the top level must be a hash of jobs and keywords"}
	}
	vars := c.lookupTable()
	repo := newRepoFacts(c, vars)
	tree, included, err := resolveIncludes(tree, spent, c.Includes, c.Artifacts, repo, func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
	if err != nil {
		return nil, err
	}
	if tree, err = resolveExtends(tree); err != nil {
		return nil, err
	}
	if tree, err = resolveReferences(tree); err != nil {
		return nil, err
	}
	if countNodes(tree, map[*val]int{}) > MaxNodes {
		return nil, tooLarge(0)
	}
	cfg := &config{instances: map[string][]string{}, repo: repo, included: included}
	if err := cfg.readTop(tree); err != nil {
		return nil, err
	}
	cfg.merged = mergedYAML(tree, cfg.stages)
	if err := cfg.checkGraph(); err != nil {
		return nil, err
	}
	if err := cfg.checkOnStop(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (cfg *config) warn(s string) { cfg.warnings = append(cfg.warnings, s) }

func (cfg *config) readTop(tree *val) error {
	for i, k := range tree.keys {
		if why, ok := unsupportedTop[k]; ok {
			return errAt(tree.vals[i], "", k, "is not supported by jobapi yet%s", why)
		}
	}
	// stages (types is GitLab's deprecated name for them)
	stagesVal := tree.get("stages")
	if stagesVal == nil || stagesVal.kind == vNull {
		stagesVal = tree.get("types")
	}
	declared := []string{"build", "test", "deploy"}
	if stagesVal != nil && stagesVal.kind != vNull {
		list, err := stringList(stagesVal, "", "stages")
		if err != nil {
			return err
		}
		declared = nil
		for _, s := range list {
			if s == "" || len(s) > builds.MaxNameLength {
				return errAt(stagesVal, "", "stages", "config should hold stage names of 1 to %d characters", builds.MaxNameLength)
			}
			if !slices.Contains(declared, s) {
				declared = append(declared, s)
			}
		}
	}
	cfg.stages = declared
	if !slices.Contains(cfg.stages, ".pre") {
		cfg.stages = append([]string{".pre"}, cfg.stages...)
	}
	if !slices.Contains(cfg.stages, ".post") {
		cfg.stages = append(cfg.stages, ".post")
	}
	if len(cfg.stages) > builds.MaxStages {
		return errAt(stagesVal, "", "stages", "config has more than %d stages", builds.MaxStages)
	}

	if v := tree.get("variables"); v != nil && v.kind != vNull {
		vars, err := parseVariables(v, "", "variables", true)
		if err != nil {
			return err
		}
		cfg.globals = vars
	}

	defaults, err := cfg.readDefaults(tree)
	if err != nil {
		return err
	}
	if err := cfg.readWorkflow(tree.get("workflow")); err != nil {
		return err
	}

	visible := 0
	for _, name := range tree.keys {
		if !reservedTop[name] && !isHidden(name) {
			visible++
		}
	}
	if visible > builds.MaxJobsPerPipeline { // refuse before reading them all
		return &Error{Message: fmt.Sprintf("the configuration defines %d jobs; at most %d are accepted", visible, builds.MaxJobsPerPipeline)}
	}
	for i, name := range tree.keys {
		if reservedTop[name] || isHidden(name) {
			continue
		}
		if err := cfg.readJob(name, tree.vals[i], defaults); err != nil {
			return err
		}
	}
	if len(cfg.jobs) == 0 {
		return &Error{Key: "jobs", Message: "config should contain at least one visible job"}
	}
	if len(cfg.jobs) > builds.MaxJobsPerPipeline {
		return &Error{Message: fmt.Sprintf("the configuration defines %d jobs (parallel copies counted); at most %d are accepted", len(cfg.jobs), builds.MaxJobsPerPipeline)}
	}
	return nil
}

// readDefaults checks `default:` and folds the legacy top-level keys into it.
func (cfg *config) readDefaults(tree *val) (map[string]*val, error) {
	defaults := map[string]*val{}
	d := tree.get("default")
	if d != nil && d.kind != vNull {
		if d.kind != vMap {
			return nil, errAt(d, "", "default", "config should be a hash")
		}
		if err := checkKeys(d, "", "default", defaultKeys, defaultUnsupported); err != nil {
			return nil, err
		}
		for i, k := range d.keys {
			if d.vals[i].kind != vNull {
				defaults[k] = d.vals[i]
			}
		}
	}
	for _, k := range legacyGlobals {
		v := tree.get(k)
		if v == nil || v.kind == vNull {
			continue
		}
		if _, both := defaults[k]; both {
			return nil, errAt(v, "", "default", "%s is defined in top-level and `default:` entry", k)
		}
		defaults[k] = v
	}
	// Check each once here, so that a mistake (or a warning) is reported at default:, not
	// at every job.
	for _, k := range defaultKeys {
		if v, ok := defaults[k]; ok {
			if err := parseInheritable(&builds.JobDefinition{}, k, v, "", "default:"+k, cfg.warn); err != nil {
				return nil, err
			}
		}
	}
	return defaults, nil
}

// parseInheritable sets one of the keys `default:` may give.
func parseInheritable(def *builds.JobDefinition, k string, v *val, job, key string, warn func(string)) error {
	var err error
	switch k {
	case "image":
		def.Image, err = parseImage(v, job, key)
	case "services":
		def.Services, err = parseServices(v, job, key)
	case "before_script":
		def.BeforeScript, err = scriptLines(v, job, key)
	case "after_script":
		def.AfterScript, err = scriptLines(v, job, key)
	case "tags":
		def.Tags, err = stringList(v, job, key)
	case "timeout":
		def.TimeoutSeconds, err = durationSeconds(v, job, key, builds.MaxTimeoutSeconds, "1 month")
		if err == nil && def.TimeoutSeconds < 1 {
			err = errAt(v, job, key, "config should be a duration of at least 1 second")
		}
	case "retry":
		def.Retry, err = parseRetry(v, job, key, warn)
	case "cache":
		def.Cache, err = parseCaches(v, job, key, warn)
	case "artifacts":
		def.Artifacts, err = parseArtifacts(v, job, key)
	case "interruptible":
		def.Interruptible, err = boolValue(v, job, key)
	case "id_tokens":
		def.IDTokens, err = parseIDTokens(v, job, key)
	}
	return err
}

func (cfg *config) readJob(name string, v *val, defaults map[string]*val) error {
	if len(name) > builds.MaxNameLength {
		return errAt(v, "", "jobs", "name %.40q… is longer than %d characters", name, builds.MaxNameLength)
	}
	if v.kind != vMap {
		return errAt(v, name, "", "config should implement the script:, run:, or trigger: keyword")
	}
	if err := checkKeys(v, name, "", jobKeys, jobUnsupported); err != nil {
		return err
	}
	bridge := v.has("trigger")
	if bridge {
		for _, k := range bridgeRunnerKeys {
			if x := v.get(k); x != nil && x.kind != vNull {
				return errAt(x, name, "", "config contains unknown keys: %s (a trigger job runs nothing itself)", k)
			}
		}
	} else if !v.has("script") {
		if s := v.get("script"); s != nil {
			return errAt(s, name, "script", "can't be blank")
		}
		return errAt(v, name, "", "config should implement the script:, run:, or trigger: keyword")
	}
	j := &jobSpec{name: name, base: name, line: v.line}
	def := &j.def
	def.Name = name
	var err error
	if bridge {
		if def.Trigger, err = parseTrigger(v.get("trigger"), name); err != nil {
			return err
		}
	}

	// stage (type is GitLab's deprecated name for it)
	def.Stage = builds.DefaultStage
	stageVal := v.get("stage")
	if stageVal == nil || stageVal.kind == vNull {
		stageVal = v.get("type")
	}
	if stageVal != nil && stageVal.kind != vNull {
		if def.Stage, err = stringValue(stageVal, name, "stage"); err != nil {
			return err
		}
	}
	if !slices.Contains(cfg.stages, def.Stage) {
		return errAt(orVal(stageVal, v), name, "stage", "chosen stage %s does not exist; available stages are %s", def.Stage, strings.Join(cfg.stages, ", "))
	}

	if !bridge {
		if def.Script, err = scriptLines(v.get("script"), name, "script"); err != nil {
			return err
		}
		if len(def.Script) == 0 {
			return errAt(v.get("script"), name, "script", "can't be blank")
		}
	}

	// inherit: which defaults and global variables the job takes
	inheritDefaults := map[string]bool(nil) // nil: all
	if x := v.get("inherit"); x != nil && x.kind != vNull {
		if inheritDefaults, j.inheritVars, err = parseInherit(x, name); err != nil {
			return err
		}
	}
	for _, k := range defaultKeys {
		if bridge { // default: holds what runners use; a bridge takes none of it (GitLab)
			break
		}
		kv, key, warn := v.get(k), k, cfg.warn
		if kv == nil || kv.kind == vNull {
			dv, ok := defaults[k]
			if !ok || (inheritDefaults != nil && !inheritDefaults[k]) {
				continue
			}
			kv, key, warn = dv, "default:"+k, func(string) {} // warned once, at default:
		}
		if err := parseInheritable(def, k, kv, name, key, warn); err != nil {
			return err
		}
		if k == "cache" {
			if j.cacheKeys, err = cacheKeySpecs(kv, name, key); err != nil {
				return err
			}
		}
	}

	if x := v.get("variables"); x != nil && x.kind != vNull {
		if j.vars, err = parseVariables(x, name, "variables", false); err != nil {
			return err
		}
	}

	if x := v.get("allow_failure"); x != nil && x.kind != vNull {
		if def.AllowFailure, def.AllowFailureExitCodes, err = parseAllowFailure(x, name, "allow_failure"); err != nil {
			return err
		}
	}

	j.staticWhen = builds.WhenOnSuccess
	whenVal := v.get("when")
	if whenVal != nil && whenVal.kind != vNull {
		w, err := stringValue(whenVal, name, "when")
		if err != nil || !slices.Contains(jobWhen, w) {
			return errAt(whenVal, name, "when", "config should be one of: %s", strings.Join(jobWhen, ", "))
		}
		j.staticWhen = w
	}
	def.When = j.staticWhen
	// GitLab: a manual job may fail unless allow_failure says otherwise.
	if !v.has("allow_failure") && def.When == builds.WhenManual {
		def.AllowFailure = true
	}
	j.hasRules = v.has("rules")
	startIn := v.get("start_in")
	switch {
	case startIn != nil && startIn.kind != vNull && j.hasRules:
		return errAt(startIn, name, "", "config key may not be used with `rules`: start_in")
	case def.When == builds.WhenDelayed:
		if startIn == nil || startIn.kind == vNull {
			return errAt(v, name, "start_in", "should be a duration when when: delayed")
		}
		if def.StartInSeconds, err = durationSeconds(startIn, name, "start_in", maxStartIn, "1 week"); err != nil {
			return err
		}
	case startIn != nil && startIn.kind != vNull:
		return errAt(startIn, name, "start_in", "should be blank unless when: delayed")
	}

	if x := v.get("needs"); x != nil && x.kind != vNull {
		if j.needs, err = parseNeeds(x, name, "needs"); err != nil {
			return err
		}
		def.NeedsDeclared = true
	}
	if x := v.get("dependencies"); x != nil && x.kind != vNull {
		if j.deps, err = stringList(x, name, "dependencies"); err != nil {
			return err
		}
		j.depsLine = x.line
		def.DependenciesDeclared = true
		if def.NeedsDeclared && len(j.deps) > 0 {
			var missing []string
			for _, d := range j.deps {
				if !slices.ContainsFunc(j.needs, func(n needSpec) bool { return n.job == d || n.base == d }) {
					missing = append(missing, d)
				}
			}
			if len(missing) > 0 {
				return errAt(x, name, "dependencies", "the %s should be part of needs", strings.Join(missing, ", "))
			}
		}
	}
	if x := v.get("coverage"); x != nil && x.kind != vNull {
		if def.CoverageRegex, err = parseCoverage(x, name); err != nil {
			return err
		}
	}
	if x := v.get("environment"); x != nil && x.kind != vNull {
		if j.env, err = parseEnvironment(x, name); err != nil {
			return err
		}
	}
	if x := v.get("resource_group"); x != nil && x.kind != vNull {
		if j.resourceGroup, err = stringValue(x, name, "resource_group"); err != nil {
			return err
		}
		j.resourceGroupLine = x.line
	}
	var both []string
	for _, k := range []string{"only", "except"} {
		x := v.get(k)
		if x == nil || x.kind == vNull {
			continue
		}
		if j.hasRules {
			both = append(both, k)
			continue
		}
		p, err := parsePolicy(x, name, k)
		if err != nil {
			return err
		}
		if k == "only" {
			j.only = p
		} else {
			j.except = p
		}
	}
	if len(both) > 0 {
		return errAt(v, name, "", "config key may not be used with `rules`: %s", strings.Join(both, ", "))
	}
	if j.only == nil && !j.hasRules && !cfg.hasWorkflow {
		j.only = defaultOnly
	}
	if j.hasRules {
		if j.rules, err = parseRules(v.get("rules"), name, "rules", false); err != nil {
			return err
		}
		if !cfg.hasWorkflow && len(j.rules) > 0 {
			last := j.rules[len(j.rules)-1]
			if last.cond == nil && last.changes == nil && last.exists == nil && last.when != "never" && last.allowFailure == nil && last.vars == nil && !last.hasNeeds {
				cfg.warn(fmt.Sprintf("jobs:%s may allow multiple pipelines to run for a single action due to `rules:when` clause with no `workflow:rules`", name))
			}
		}
	}
	if err := checkLimits(def, v, name); err != nil {
		return err
	}
	return cfg.addInstances(j, v.get("parallel"))
}

// checkLimits applies builds' limits here, where the line of the offending key is known.
func checkLimits(def *builds.JobDefinition, v *val, job string) error {
	for _, s := range []struct {
		key   string
		lines []string
	}{{"before_script", def.BeforeScript}, {"script", def.Script}, {"after_script", def.AfterScript}} {
		at := orVal(v.get(s.key), v)
		if len(s.lines) > builds.MaxScriptLines {
			return errAt(at, job, s.key, "config has %d lines; at most %d are accepted", len(s.lines), builds.MaxScriptLines)
		}
		for _, l := range s.lines {
			if len(l) > builds.MaxScriptLine {
				return errAt(at, job, s.key, "config has a line longer than %d bytes", builds.MaxScriptLine)
			}
		}
	}
	at := orVal(v.get("tags"), v)
	if len(def.Tags) > builds.MaxTags {
		return errAt(at, job, "tags", "config has %d tags; at most %d are accepted", len(def.Tags), builds.MaxTags)
	}
	for _, t := range def.Tags {
		if t == "" || len(t) > builds.MaxNameLength {
			return errAt(at, job, "tags", "config should hold tags of 1 to %d characters", builds.MaxNameLength)
		}
	}
	return nil
}

func orVal(a, b *val) *val {
	if a != nil {
		return a
	}
	return b
}

// parseInherit reads inherit: {default: bool|[keys], variables: bool|[names]}; nil maps
// mean "all".
func parseInherit(v *val, job string) (defaults, vars map[string]bool, err error) {
	if v.kind != vMap {
		return nil, nil, errAt(v, job, "inherit", "config should be a hash")
	}
	if err := checkKeys(v, job, "inherit", []string{"default", "variables"}, nil); err != nil {
		return nil, nil, err
	}
	read := func(key string, allowed []string) (map[string]bool, error) {
		x := v.get(key)
		if x == nil || x.kind == vNull {
			return nil, nil
		}
		switch x.kind {
		case vBool:
			if x.b {
				return nil, nil
			}
			return map[string]bool{}, nil
		case vSeq:
			names, err := stringList(x, job, "inherit:"+key)
			if err != nil {
				return nil, err
			}
			m := map[string]bool{}
			for _, n := range names {
				_, refusedAnyway := defaultUnsupported[n] // harmless to list: default: refuses it
				if allowed != nil && !slices.Contains(allowed, n) && !refusedAnyway {
					return nil, errAt(x, job, "inherit:"+key, "config contains unknown values: %s", n)
				}
				m[n] = true
			}
			return m, nil
		}
		return nil, errAt(x, job, "inherit:"+key, "config should be a boolean value or an array of strings")
	}
	if defaults, err = read("default", defaultKeys); err != nil {
		return nil, nil, err
	}
	vars, err = read("variables", nil)
	return defaults, vars, err
}

// parseNeeds reads needs: a list of names or {job, artifacts, optional, parallel}.
func parseNeeds(v *val, job, key string) ([]needSpec, error) {
	if v.kind != vSeq {
		return nil, errAt(v, job, key, "config should be an array of strings or hashes")
	}
	if len(v.vals) > maxNeeds {
		return nil, errAt(v, job, key, "config has %d needs; at most %d are allowed", len(v.vals), maxNeeds)
	}
	out := make([]needSpec, 0, len(v.vals))
	for _, item := range v.vals {
		switch item.kind {
		case vString:
			out = append(out, needSpec{job: item.text, artifacts: true, line: item.line})
		case vMap:
			if item.has("pipeline") || item.has("project") {
				return nil, errAt(item, job, key, "need of another pipeline or project is not supported by jobapi yet")
			}
			if err := checkKeys(item, job, key, []string{"job", "artifacts", "optional", "parallel"}, nil); err != nil {
				return nil, err
			}
			name := item.get("job")
			if name == nil || name.kind != vString || name.text == "" {
				return nil, errAt(item, job, key, "config: each need names a job (job: build)")
			}
			n := needSpec{job: name.text, artifacts: true, line: item.line}
			var err error
			if x := item.get("artifacts"); x != nil && x.kind != vNull {
				if n.artifacts, err = boolValue(x, job, key+":artifacts"); err != nil {
					return nil, err
				}
			}
			if x := item.get("optional"); x != nil && x.kind != vNull {
				if n.optional, err = boolValue(x, job, key+":optional"); err != nil {
					return nil, err
				}
			}
			if x := item.get("parallel"); x != nil && x.kind != vNull {
				names, err := matrixNeedNames(x, n.job, job, key)
				if err != nil {
					return nil, err
				}
				for _, nm := range names {
					copyN := n
					copyN.job, copyN.base = nm, n.job
					out = append(out, copyN)
				}
				continue
			}
			out = append(out, n)
		default:
			return nil, errAt(item, job, key, "config should be an array of strings or hashes")
		}
	}
	return out, nil
}

// matrixNeedNames reads a need's parallel: {matrix: [...]} into the names of the copies
// it selects.
func matrixNeedNames(v *val, base, job, key string) ([]string, error) {
	if v.kind != vMap || v.get("matrix") == nil {
		return nil, errAt(v, job, key+":parallel", "config should be a hash with matrix:")
	}
	sets, err := parseMatrix(v.get("matrix"), job, key+":parallel:matrix")
	if err != nil {
		return nil, err
	}
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = matrixName(base, s)
	}
	return names, nil
}
