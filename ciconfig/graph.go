package ciconfig

import (
	"fmt"
	"slices"
	"strings"
)

// checkGraph expands needs and dependencies that name a parallel job to all its copies
// (GitLab's normalizer) and checks them as GitLab's YamlProcessor does: every name is a
// job of the file (an optional need may name none), in the same or an earlier stage; and
// the needs make no cycle.
func (cfg *config) checkGraph() error {
	byName := make(map[string]*jobSpec, len(cfg.jobs))
	for _, j := range cfg.jobs {
		if _, dup := byName[j.name]; dup {
			return errAt(nil, j.name, "", "config: a job of this name is defined twice (a parallel copy has it too)")
		}
		byName[j.name] = j
	}
	stageIndex := func(name string) int { return slices.Index(cfg.stages, byName[name].def.Stage) }
	check := func(j *jobSpec, needs []needSpec, key string) ([]needSpec, error) {
		out := make([]needSpec, 0, len(needs))
		for _, n := range needs {
			for _, name := range cfg.expand(n.job) {
				target, ok := byName[name]
				switch {
				case !ok && n.optional:
					continue // checked again when the pipeline is created
				case !ok:
					return nil, &Error{Line: n.line, Job: j.name, Key: key, Message: "undefined need: " + name}
				case name == j.name:
					return nil, &Error{Line: n.line, Job: j.name, Key: key, Message: "a job cannot need itself"}
				case stageIndex(name) > stageIndex(j.name):
					return nil, &Error{Line: n.line, Job: j.name, Key: key, Message: fmt.Sprintf("need %s is not defined in current or prior stages (it is in stage %s)", name, target.def.Stage)}
				}
				c := n
				c.job = name
				out = append(out, c)
			}
		}
		return out, nil
	}
	for _, j := range cfg.jobs {
		var err error
		if j.needs, err = check(j, j.needs, "needs"); err != nil {
			return err
		}
		for i := range j.rules {
			if !j.rules[i].hasNeeds {
				continue
			}
			rules := slices.Clone(j.rules) // copies of a parallel job share the rules
			if rules[i].needs, err = check(j, rules[i].needs, "rules:needs"); err != nil {
				return err
			}
			j.rules = rules
		}
		var deps []string
		for _, d := range j.deps {
			for _, name := range cfg.expand(d) {
				if _, ok := byName[name]; !ok {
					return &Error{Line: j.depsLine, Job: j.name, Key: "dependencies", Message: "undefined dependency: " + name}
				}
				if stageIndex(name) > stageIndex(j.name) {
					return &Error{Line: j.depsLine, Job: j.name, Key: "dependencies", Message: fmt.Sprintf("dependency %s is not defined in current or prior stages", name)}
				}
				deps = append(deps, name)
			}
		}
		j.deps = deps
		if err := checkArtifactJobs(j, byName, stageIndex); err != nil {
			return err
		}
	}
	if cycle := needsCycle(cfg.jobs); cycle != nil {
		line := 0
		for _, n := range byName[cycle[0]].needs {
			if n.job == cycle[1] {
				line = n.line
			}
		}
		return &Error{Line: line, Job: cycle[0], Key: "needs", Message: "The pipeline has circular dependencies: " + strings.Join(cycle, " → ")}
	}
	return nil
}

// checkArtifactJobs: a bridge's trigger:include: artifact names a job that ends before it
// runs, one of an earlier stage or one it needs (GitLab's YamlProcessor
// validate_dynamic_child_pipeline_dependencies!, in its words).
func checkArtifactJobs(j *jobSpec, byName map[string]*jobSpec, stageIndex func(string) int) error {
	if j.def.Trigger == nil {
		return nil
	}
	for _, inc := range j.def.Trigger.Include {
		if inc.Job == "" {
			continue
		}
		if _, ok := byName[inc.Job]; !ok {
			return &Error{Line: j.line, Job: j.name, Key: "trigger:include", Message: "undefined dependency: " + inc.Job}
		}
		needed := slices.ContainsFunc(j.needs, func(n needSpec) bool { return n.job == inc.Job })
		if !needed && stageIndex(inc.Job) >= stageIndex(j.name) {
			return &Error{Line: j.line, Job: j.name, Key: "trigger:include",
				Message: fmt.Sprintf("dependency %s is not defined in current or prior stages (it must be in an earlier stage, or in needs)", inc.Job)}
		}
	}
	return nil
}

// expand names the copies of a parallel job, or the name itself.
func (cfg *config) expand(name string) []string {
	if copies, ok := cfg.instances[name]; ok {
		return copies
	}
	return []string{name}
}

// needsCycle finds a cycle of needs and returns it (first job repeated at the end).
func needsCycle(jobs []*jobSpec) []string {
	byName := make(map[string]*jobSpec, len(jobs))
	for _, j := range jobs {
		byName[j.name] = j
	}
	const (
		white = iota
		grey
		black
	)
	color := make(map[string]int, len(jobs))
	var stack []string
	var visit func(name string) []string
	visit = func(name string) []string {
		color[name] = grey
		stack = append(stack, name)
		for _, n := range byName[name].needs {
			if _, ok := byName[n.job]; !ok {
				continue
			}
			switch color[n.job] {
			case grey:
				i := slices.Index(stack, n.job)
				return append(slices.Clone(stack[i:]), n.job)
			case white:
				if c := visit(n.job); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[name] = black
		return nil
	}
	for _, j := range jobs {
		if color[j.name] == white {
			if c := visit(j.name); c != nil {
				return c
			}
		}
	}
	return nil
}
