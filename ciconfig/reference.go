package ciconfig

import (
	"fmt"
	"strings"
)

// resolveReferences replaces every !reference [a, b, …] with the value found by walking
// those keys from the top of the configuration, after extends, as GitLab does. The value
// found is resolved in turn; a reference that reaches itself is an error, and so is a
// path that leads nowhere. Values without references are shared, not copied.
func resolveReferences(root *val) (*val, error) {
	r := resolver{root: root, memo: map[*val]*val{}, busy: map[*val]bool{}}
	return r.resolve(root)
}

type resolver struct {
	root *val
	memo map[*val]*val
	busy map[*val]bool
}

func (r *resolver) resolve(v *val) (*val, error) {
	if got, ok := r.memo[v]; ok {
		return got, nil
	}
	var out *val
	switch v.kind {
	case vRef:
		if r.busy[v] {
			return nil, errAt(v, "", "", "%s is part of a circular chain", refString(v))
		}
		r.busy[v] = true
		target := r.root
		for _, step := range v.vals {
			target = target.get(step.text)
			if target == nil {
				delete(r.busy, v)
				return nil, errAt(v, "", "", "%s could not be found", refString(v))
			}
		}
		got, err := r.resolve(target)
		delete(r.busy, v)
		if err != nil {
			return nil, err
		}
		if got.kind == vNull {
			return nil, errAt(v, "", "", "%s could not be found", refString(v))
		}
		out = got
	case vMap, vSeq:
		out = v
		for i, c := range v.vals {
			got, err := r.resolve(c)
			if err != nil {
				return nil, err
			}
			if got != c {
				if out == v { // copy on the first change
					out = &val{kind: v.kind, line: v.line, keys: v.keys, index: v.index, vals: append([]*val(nil), v.vals...)}
				}
				out.vals[i] = got
			}
		}
	default:
		out = v
	}
	r.memo[v] = out
	return out, nil
}

// refString prints a reference as GitLab's messages do: !reference ["job", "script"].
func refString(v *val) string {
	parts := make([]string, len(v.vals))
	for i, p := range v.vals {
		parts[i] = fmt.Sprintf("%q", p.text)
	}
	return "!reference [" + strings.Join(parts, ", ") + "]"
}
