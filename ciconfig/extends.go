package ciconfig

import (
	"fmt"
	"strings"
)

// maxExtendsAncestors is GitLab's MAX_NESTING_LEVELS for extends: an entry may have ten
// ancestors, so a chain holds at most eleven entries.
const maxExtendsAncestors = 10

// resolveExtends merges every top-level entry that has `extends` with its bases, as
// GitLab's Extendable does: the bases deep-merged in order (a later one wins), then the
// entry itself on top. Hashes merge key by key at every level; anything else (arrays,
// scripts, scalars) is replaced whole. The entry keeps its `extends` key, as in GitLab's
// merged YAML.
func resolveExtends(root *val) (*val, error) {
	x := extender{root: root, done: map[string]extended{}, busy: map[string]bool{}}
	out := newMap(root.line)
	for i, key := range root.keys {
		v := root.vals[i]
		if v.kind == vMap && v.get("extends") != nil {
			got, err := x.extend(key, 0)
			if err != nil {
				return nil, err
			}
			v = got.v
		}
		out.set(key, v)
	}
	return out, nil
}

type extended struct {
	v *val
	// chain is the longest line of entries with extends from this one down (itself
	// first): GitLab counts only those for the nesting limit.
	chain []string
}

type extender struct {
	root *val
	done map[string]extended
	busy map[string]bool
}

func (x *extender) extend(key string, ancestors int) (extended, error) {
	v := x.root.get(key)
	if v.kind != vMap || v.get("extends") == nil {
		return extended{v: v}, nil
	}
	if got, ok := x.done[key]; ok {
		if ancestors+len(got.chain)-1 > maxExtendsAncestors {
			// GitLab names the first entry of the line with more than ten ancestors.
			return extended{}, x.errorf(got.chain[maxExtendsAncestors+1-ancestors], "nesting too deep in `extends`")
		}
		return got, nil
	}
	if ancestors > maxExtendsAncestors {
		return extended{}, x.errorf(key, "nesting too deep in `extends`")
	}
	if x.busy[key] {
		return extended{}, x.errorf(key, "circular dependency detected in `extends`")
	}
	bases, err := extendsNames(key, v.get("extends"))
	if err != nil {
		return extended{}, err
	}
	var unknown, invalid []string
	for _, b := range bases {
		switch bv := x.root.get(b); {
		case bv == nil:
			unknown = append(unknown, b)
		case bv.kind != vMap:
			invalid = append(invalid, b)
		}
	}
	if len(unknown) > 0 {
		return extended{}, x.errorf(key, "unknown keys in `extends` (%s)", strings.Join(unknown, ", "))
	}
	if len(invalid) > 0 {
		return extended{}, x.errorf(key, "invalid base hashes in `extends` (%s)", strings.Join(invalid, ", "))
	}
	x.busy[key] = true
	defer delete(x.busy, key)
	var merged *val
	var longest []string
	for _, b := range bases {
		got, err := x.extend(b, ancestors+1)
		if err != nil {
			return extended{}, err
		}
		if len(got.chain) > len(longest) {
			longest = got.chain
		}
		merged = deepMerge(merged, got.v)
	}
	out := extended{v: deepMerge(merged, v), chain: append([]string{key}, longest...)}
	x.done[key] = out
	return out, nil
}

func (x *extender) errorf(key, format string, args ...any) *Error {
	e := errAt(x.root.get(key).get("extends"), "", "", "%s: %s", key, fmt.Sprintf(format, args...))
	if !isHidden(key) && !reservedTop[key] {
		e.Job, e.Key, e.Message = key, "extends", fmt.Sprintf(format, args...)
	}
	return e
}

// extendsNames reads `extends:`, a name or a list of names.
func extendsNames(job string, v *val) ([]string, error) {
	switch v.kind {
	case vString:
		return []string{v.text}, nil
	case vSeq:
		names := make([]string, 0, len(v.vals))
		for _, item := range v.vals {
			if item.kind != vString {
				return nil, errAt(v, job, "extends", "config should be an array of strings or a string")
			}
			names = append(names, item.text)
		}
		return names, nil
	}
	return nil, errAt(v, job, "extends", "config should be an array of strings or a string")
}

// deepMerge is ActiveSupport's Hash#deep_merge: b's keys over a's, hashes merged
// recursively, everything else replaced. A nil a is an empty hash. Neither is changed.
func deepMerge(a, b *val) *val {
	if a == nil {
		return b
	}
	out := newMap(b.line)
	out.keys = make([]string, 0, len(a.keys)+len(b.keys))
	out.vals = make([]*val, 0, len(a.keys)+len(b.keys))
	for i, k := range a.keys {
		out.set(k, a.vals[i])
	}
	for i, k := range b.keys {
		bv := b.vals[i]
		if av := out.get(k); av != nil && av.kind == vMap && bv.kind == vMap {
			bv = deepMerge(av, bv)
		}
		out.set(k, bv)
	}
	return out
}
