package ciconfig

import (
	"fmt"
	"strings"
)

// addInstances adds the job, or its copies when it has `parallel:`, as GitLab's
// normalizer: parallel: N gives "name 1/N" … "name N/N"; parallel: matrix gives one copy
// per combination, "name: [a, b]", each with the combination's variables.
func (cfg *config) addInstances(j *jobSpec, p *val) error {
	if p == nil || p.kind == vNull {
		cfg.jobs = append(cfg.jobs, j)
		return nil
	}
	var names []string
	var sets [][]yamlVar
	switch p.kind {
	case vInt:
		n, err := intValue(p, j.name, "parallel")
		if err != nil || n < 1 || n > maxParallel {
			return errAt(p, j.name, "parallel", "config should be an integer between 1 and %d, or a hash with matrix:", maxParallel)
		}
		for i := 1; i <= n; i++ {
			names = append(names, fmt.Sprintf("%s %d/%d", j.name, i, n))
		}
	case vMap:
		if err := checkKeys(p, j.name, "parallel", []string{"matrix"}, nil); err != nil {
			return err
		}
		m := p.get("matrix")
		if m == nil || m.kind == vNull {
			return errAt(p, j.name, "parallel", "config missing required keys: matrix")
		}
		var err error
		if sets, err = parseMatrix(m, j.name, "parallel:matrix"); err != nil {
			return err
		}
		for _, s := range sets {
			names = append(names, matrixName(j.name, s))
		}
	default:
		return errAt(p, j.name, "parallel", "config should be an integer or a hash")
	}
	seen := map[string]bool{}
	for i, name := range names {
		if seen[name] {
			return errAt(p, j.name, "parallel:matrix", "config generates the job %q twice: each combination must differ", name)
		}
		seen[name] = true
		c := *j
		c.name = name
		c.def.Name = name
		c.def.NodeIndex, c.def.NodeTotal = i+1, len(names)
		if sets != nil {
			c.vars = append(append([]yamlVar(nil), j.vars...), sets[i]...)
		}
		cfg.jobs = append(cfg.jobs, &c)
	}
	cfg.instances[j.name] = names
	return nil
}

// parseMatrix expands parallel: matrix: a list of hashes VAR: value or VAR: [values], each
// hash giving the product of its lists, in GitLab's order (the first variable's values
// change slowest). At most 200 combinations in all.
func parseMatrix(v *val, job, key string) ([][]yamlVar, error) {
	if v.kind != vSeq || len(v.vals) == 0 {
		return nil, errAt(v, job, key, "config should be an array of hashes")
	}
	var out [][]yamlVar
	for _, entry := range v.vals {
		if entry.kind != vMap || len(entry.keys) == 0 {
			return nil, errAt(entry, job, key, "config should be an array of hashes")
		}
		combos := [][]yamlVar{nil}
		for i, name := range entry.keys {
			if !variableName.MatchString(name) {
				return nil, errAt(entry, job, key, "%q is not a valid variable name", name)
			}
			x := entry.vals[i]
			var values []string
			switch x.kind {
			case vString, vInt, vFloat:
				values = []string{x.text}
			case vSeq:
				if len(x.vals) == 0 {
					return nil, errAt(x, job, key, "%s has an empty list of values", name)
				}
				for _, item := range x.vals {
					if item.kind != vString && item.kind != vInt && item.kind != vFloat {
						return nil, errAt(item, job, key, "%s values should be strings or numbers", name)
					}
					values = append(values, item.text)
				}
			default:
				return nil, errAt(x, job, key, "%s should be a string, a number or an array of them", name)
			}
			next := make([][]yamlVar, 0, len(combos)*len(values))
			for _, c := range combos {
				for _, value := range values {
					n := append(append([]yamlVar(nil), c...), yamlVar{key: name, value: value, line: x.line})
					next = append(next, n)
				}
				if len(next)+len(out) > maxParallel {
					return nil, errAt(v, job, key, "config generates too many jobs (maximum is %d)", maxParallel)
				}
			}
			combos = next
		}
		out = append(out, combos...)
	}
	return out, nil
}

// matrixName is GitLab's name of a matrix copy: "job: [value1, value2]".
func matrixName(job string, set []yamlVar) string {
	values := make([]string, len(set))
	for i, v := range set {
		values[i] = v.value
	}
	return job + ": [" + strings.Join(values, ", ") + "]"
}
