package ciconfig

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits on what one .gitlab-ci.yml may be. GitLab's own are 2 MB (max_yaml_size_bytes)
// and 100 levels (max_yaml_depth); jobapi takes 1 MiB, which is already ten times the
// largest file we have seen, and bounds what aliases, extends and !reference expand to,
// which GitLab's Ruby objects do by sharing and jobapi's walks would not.
const (
	MaxConfigBytes = 1 << 20
	MaxDepth       = 100
	// MaxNodes bounds the configuration expanded: every alias, extends and !reference
	// counted as the copy it stands for. A 5,000-job file of 30 keys a job stays well below.
	// The files a configuration includes share it with the configuration's own.
	MaxNodes = 500_000
	// MaxTotalBytes bounds the text of a configuration and every file it includes (local,
	// remote, artifact, nested), counted as each is read and before it is parsed: eight
	// files of the largest size. With MaxNodes it bounds what include fan-out can cost.
	MaxTotalBytes = 8 << 20
)

// budget is what the files of one configuration may still cost, spent as each is read.
type budget struct {
	bytes, nodes int // spent
}

// spendBytes takes n bytes of text, or says what the limit is.
func (b *budget) spendBytes(n int) error {
	if b.bytes+n > MaxTotalBytes {
		return fmt.Errorf("the configuration and its includes are more than %d bytes (8 MiB) in all; at most %d are accepted", MaxTotalBytes, MaxTotalBytes)
	}
	b.bytes += n
	return nil
}

type vkind uint8

const (
	vNull vkind = iota
	vBool
	vInt
	vFloat
	vString
	vMap
	vSeq
	vRef // !reference [a, b]: items are the path
)

// val is a YAML value as GitLab's Ruby sees it after Psych: scalars typed by YAML 1.1's
// rules (yes/no/on/off are booleans, 1_000 is an integer), mappings ordered with the
// last of repeated keys winning in the first one's place, anchors and merge keys applied.
// vals are never changed once built: aliases, extends and !reference share them.
type val struct {
	kind  vkind
	line  int
	text  string // scalars: the string Ruby's to_s would give
	b     bool
	keys  []string
	vals  []*val // vMap: values of keys; vSeq, vRef: items
	index map[string]int
}

func (v *val) get(key string) *val {
	if v == nil || v.kind != vMap {
		return nil
	}
	if i, ok := v.index[key]; ok {
		return v.vals[i]
	}
	return nil
}

// has reports whether key is present with a value other than null: GitLab treats a null
// value as not specified.
func (v *val) has(key string) bool {
	x := v.get(key)
	return x != nil && x.kind != vNull
}

func newMap(line int) *val {
	return &val{kind: vMap, line: line, index: map[string]int{}}
}

// set adds or replaces key; a replaced key keeps its place, as in a Ruby Hash.
func (v *val) set(key string, x *val) {
	if i, ok := v.index[key]; ok {
		v.vals[i] = x
		return
	}
	v.index[key] = len(v.keys)
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, x)
}

func (v *val) describe() string {
	switch v.kind {
	case vNull:
		return "null"
	case vBool:
		return "a boolean"
	case vInt:
		return "an integer"
	case vFloat:
		return "a number"
	case vString:
		return "a string"
	case vMap:
		return "a hash"
	case vSeq:
		return "an array"
	case vRef:
		return "a !reference"
	}
	return "a value"
}

// parseYAML turns the text into a value tree, refusing what is too large, too deep or
// not YAML, or past what is left of spent (the configuration's files share it, the nodes
// counted as they are built); errors are *Error with the line.
func parseYAML(src []byte, spent *budget) (*val, error) {
	if len(src) > MaxConfigBytes {
		return nil, &Error{Message: fmt.Sprintf("the configuration is %d bytes; at most %d (1 MiB) are accepted", len(src), MaxConfigBytes)}
	}
	if err := spent.spendBytes(len(src)); err != nil {
		return nil, &Error{Message: err.Error()}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(src)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Message: "Please provide content of .gitlab-ci.yml"}
		}
		return nil, yamlError(err)
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode && mappingHas(doc.Content[0], "spec") {
			return nil, &Error{Line: second.Line, Key: "spec", Message: "is not supported: the header document (spec:inputs) is not supported by jobapi yet"}
		}
		return nil, &Error{Line: second.Line, Message: "the file has a second YAML document (---): only one is accepted"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	if len(doc.Content) == 0 {
		return nil, &Error{Message: "Please provide content of .gitlab-ci.yml"}
	}
	b := builder{anchors: map[*yaml.Node]built{}, busy: map[*yaml.Node]bool{}, merged: map[*val]built{}, total: spent.nodes}
	root, err := b.build(doc.Content[0], 1)
	if err != nil {
		return nil, err
	}
	spent.nodes = b.total
	return root.v, nil
}

func mappingHas(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns the YAML library's message into an *Error with its line.
func yamlError(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		// The library counts lines from 0 for parser errors (it adds 1 for scanner
		// errors only); those are the messages below. Their line is where the block or
		// flow collection that went wrong starts, as in Psych's "while parsing a block
		// mapping at line N".
		if strings.HasPrefix(m[2], "did not find expected") || strings.HasPrefix(m[2], "found duplicate %") ||
			m[2] == "found incompatible YAML document" || m[2] == "found undefined tag handle" {
			line++
		}
		return &Error{Line: line, Message: "Invalid configuration format: " + m[2]}
	}
	return &Error{Message: "Invalid configuration format: " + strings.TrimPrefix(msg, "yaml: ")}
}

type built struct {
	v     *val
	size  int // nodes once every alias is expanded
	depth int
}

type builder struct {
	anchors map[*yaml.Node]built
	busy    map[*yaml.Node]bool // anchors being built: an alias to one is a loop
	merged  map[*val]built      // sizes and depths of the values merge keys copy
	total   int                 // nodes built, with those of the configuration's files read before
}

func tooLarge(line int) *Error {
	return &Error{Line: line, Message: fmt.Sprintf("the configuration expands to more than %d values (aliases, extends and !reference counted as copies)", MaxNodes)}
}

func tooDeep(line int) *Error {
	return &Error{Line: line, Message: fmt.Sprintf("the configuration is nested more than %d levels deep", MaxDepth)}
}

func (b *builder) build(n *yaml.Node, depth int) (built, error) {
	if depth > MaxDepth {
		return built{}, tooDeep(n.Line)
	}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil {
			return built{}, &Error{Line: n.Line, Message: fmt.Sprintf("unknown anchor *%s", n.Value)}
		}
		if b.busy[target] {
			return built{}, &Error{Line: n.Line, Message: fmt.Sprintf("alias *%s refers to the value that contains it", n.Value)}
		}
		got, ok := b.anchors[target]
		if !ok {
			var err error
			if got, err = b.build(target, depth); err != nil {
				return built{}, err
			}
		}
		if depth-1+got.depth > MaxDepth {
			return built{}, tooDeep(n.Line)
		}
		// The alias stands for a copy: count it again.
		if b.total += got.size; b.total > MaxNodes {
			return built{}, tooLarge(n.Line)
		}
		return got, nil
	}
	if n.Anchor != "" {
		if got, ok := b.anchors[n]; ok {
			return got, nil
		}
		b.busy[n] = true
		defer delete(b.busy, n)
	}
	if b.total++; b.total > MaxNodes {
		return built{}, tooLarge(n.Line)
	}
	var out built
	var err error
	switch n.Kind {
	case yaml.ScalarNode:
		out, err = scalar(n)
	case yaml.SequenceNode:
		out, err = b.sequence(n, depth)
	case yaml.MappingNode:
		out, err = b.mapping(n, depth)
	default:
		err = &Error{Line: n.Line, Message: "Invalid configuration format"}
	}
	if err != nil {
		return built{}, err
	}
	if n.Anchor != "" {
		b.anchors[n] = out
	}
	return out, nil
}

func (b *builder) sequence(n *yaml.Node, depth int) (built, error) {
	kind := vSeq
	switch n.Tag {
	case "!reference":
		kind = vRef
	case "", "!", "!!seq":
	default:
		return built{}, &Error{Line: n.Line, Message: fmt.Sprintf("uses the YAML tag %s, which is not supported (only !reference is)", n.Tag)}
	}
	out := built{v: &val{kind: kind, line: n.Line, vals: make([]*val, 0, len(n.Content))}, size: 1, depth: 1}
	for _, c := range n.Content {
		got, err := b.build(c, depth+1)
		if err != nil {
			return built{}, err
		}
		out.v.vals = append(out.v.vals, got.v)
		out.size += got.size
		out.depth = max(out.depth, got.depth+1)
	}
	if kind == vRef {
		if len(out.v.vals) == 0 {
			return built{}, &Error{Line: n.Line, Message: "!reference [] is not valid: name a key path such as !reference [.setup, script]"}
		}
		for _, item := range out.v.vals {
			if item.kind != vString && item.kind != vInt && item.kind != vBool {
				return built{}, &Error{Line: n.Line, Message: "!reference is not valid: its path must be a list of key names"}
			}
		}
	}
	return out, nil
}

func (b *builder) mapping(n *yaml.Node, depth int) (built, error) {
	switch n.Tag {
	case "", "!", "!!map":
	case "!reference":
		return built{}, &Error{Line: n.Line, Message: "!reference must be a list of keys, like !reference [.setup, script]"}
	default:
		return built{}, &Error{Line: n.Line, Message: fmt.Sprintf("uses the YAML tag %s, which is not supported (only !reference is)", n.Tag)}
	}
	m := newMap(n.Line)
	out := built{v: m, size: 1, depth: 1}
	sizes := map[string]int{}
	put := func(k string, got built) {
		if old, ok := sizes[k]; ok {
			out.size -= old
		}
		sizes[k] = got.size
		out.size += got.size
		out.depth = max(out.depth, got.depth+1)
		m.set(k, got.v)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind == yaml.ScalarNode && kn.Tag == "!!merge" {
			if err := b.merge(vn, depth, put); err != nil {
				return built{}, err
			}
			continue
		}
		if kn.Kind != yaml.ScalarNode {
			if kn.Kind == yaml.AliasNode && kn.Alias != nil && kn.Alias.Kind == yaml.ScalarNode {
				kn = kn.Alias
			} else {
				return built{}, &Error{Line: kn.Line, Message: "a mapping key must be a plain value, not a list or a hash"}
			}
		}
		got, err := b.build(vn, depth+1)
		if err != nil {
			return built{}, err
		}
		put(kn.Value, got)
	}
	return out, nil
}

// merge applies a `<<:` key as Ruby's Psych does: the merged keys replace those set
// before it and are replaced by those after; of a list of mappings, the earlier wins.
func (b *builder) merge(vn *yaml.Node, depth int, put func(string, built)) error {
	target := vn
	if target.Kind == yaml.AliasNode && target.Alias != nil {
		target = target.Alias
	}
	var sources []*yaml.Node
	switch target.Kind {
	case yaml.MappingNode:
		sources = []*yaml.Node{vn}
	case yaml.SequenceNode:
		for i := len(target.Content) - 1; i >= 0; i-- { // reversed: the earlier is set last and wins
			sources = append(sources, target.Content[i])
		}
	default:
		return &Error{Line: vn.Line, Message: "<< must merge a mapping (an alias such as *defaults) or a list of them"}
	}
	for _, s := range sources {
		got, err := b.build(s, depth+1)
		if err != nil {
			return err
		}
		if got.v.kind != vMap {
			return &Error{Line: s.Line, Message: "<< must merge a mapping (an alias such as *defaults) or a list of them"}
		}
		for i, k := range got.v.keys {
			put(k, b.measure(got.v.vals[i]))
		}
	}
	return nil
}

// scalar types a scalar as Psych (YAML 1.1) does: plain scalars may be null, booleans
// (yes/no/on/off/true/false), integers (with _ or , separators, 0x, 0b, leading-0 octal)
// or floats; quoted and block scalars are strings.
func scalar(n *yaml.Node) (built, error) {
	v := &val{kind: vString, line: n.Line, text: n.Value}
	out := built{v: v, size: 1, depth: 1}
	if n.Style&yaml.TaggedStyle != 0 { // an explicit tag; otherwise Tag is the library's own guess
		switch n.Tag {
		case "!!str", "!!binary", "!!timestamp":
			return out, nil
		case "!reference":
			return built{}, &Error{Line: n.Line, Message: "!reference must be a list of keys, like !reference [.setup, script]"}
		case "!", "!!null", "!!bool", "!!int", "!!float":
		default:
			return built{}, &Error{Line: n.Line, Message: fmt.Sprintf("uses the YAML tag %s, which is not supported (only !reference is)", n.Tag)}
		}
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return out, nil
	}
	typePlain(v)
	return out, nil
}

var (
	intPattern   = regexp.MustCompile(`^[-+]?(?:0b[0-1_,]+|0[0-7_,]+|0|[1-9][0-9_,]*|0x[0-9a-fA-F_,]+)$`)
	floatPattern = regexp.MustCompile(`^[-+]?(?:[0-9][0-9_,]*)?\.[0-9]*(?:[eE][-+][0-9]+)?$|^[-+]?[0-9][0-9_,]*[eE][-+]?[0-9]+$`)
)

func typePlain(v *val) {
	s := v.text
	switch strings.ToLower(s) {
	case "", "~", "null":
		*v = val{kind: vNull, line: v.line}
		return
	case "yes", "true", "on":
		*v = val{kind: vBool, line: v.line, b: true, text: "true"}
		return
	case "no", "false", "off":
		*v = val{kind: vBool, line: v.line, b: false, text: "false"}
		return
	case ".inf", "+.inf":
		*v = val{kind: vFloat, line: v.line, text: "Infinity"}
		return
	case "-.inf":
		*v = val{kind: vFloat, line: v.line, text: "-Infinity"}
		return
	case ".nan":
		*v = val{kind: vFloat, line: v.line, text: "NaN"}
		return
	}
	if intPattern.MatchString(s) {
		clean := strings.NewReplacer("_", "", ",", "").Replace(s)
		neg := strings.HasPrefix(clean, "-")
		digits := strings.TrimLeft(clean, "+-")
		base := 10
		switch {
		case strings.HasPrefix(digits, "0b"):
			base, digits = 2, digits[2:]
		case strings.HasPrefix(digits, "0x"):
			base, digits = 16, digits[2:]
		case len(digits) > 1 && digits[0] == '0':
			base, digits = 8, digits[1:]
		}
		if n, err := strconv.ParseUint(digits, base, 64); err == nil && digits != "" {
			text := strconv.FormatUint(n, 10)
			if neg && n != 0 {
				text = "-" + text
			}
			*v = val{kind: vInt, line: v.line, text: text}
			return
		}
		if base == 10 && digits != "" { // beyond 64 bits: Ruby keeps every digit
			if neg {
				digits = "-" + digits
			}
			*v = val{kind: vInt, line: v.line, text: digits}
			return
		}
	}
	if floatPattern.MatchString(s) {
		clean := strings.NewReplacer("_", "", ",", "").Replace(s)
		if f, err := strconv.ParseFloat(clean, 64); err == nil {
			*v = val{kind: vFloat, line: v.line, text: rubyFloat(f)}
			return
		}
	}
}

// rubyFloat formats f as Ruby's Float#to_s: 1.1 → "1.1", 2.0 → "2.0", 1e20 → "1.0e+20".
func rubyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	abs := math.Abs(f)
	if abs == 0 || (abs >= 1e-4 && abs < 1e16) {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+20, 1.5e-05
	mant, exp, _ := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	sign := exp[0]
	exp = strings.TrimLeft(exp[1:], "0")
	if exp == "" {
		exp = "0"
	}
	return mant + "e" + string(sign) + pad2(exp)
}

func pad2(s string) string {
	if len(s) < 2 {
		return "0" + s
	}
	return s
}

// countNodes is the size of v with shared values counted once per use; memo makes it
// linear in the distinct values. It saturates just past MaxNodes.
func countNodes(v *val, memo map[*val]int) int {
	if v == nil {
		return 0
	}
	if memo != nil {
		if n, ok := memo[v]; ok {
			return n
		}
	}
	n := 1
	for _, c := range v.vals {
		if n += countNodes(c, memo); n > MaxNodes {
			n = MaxNodes + 1
			break
		}
	}
	if memo != nil {
		memo[v] = n
	}
	return n
}

// measure is the size and depth of a value already built (one a merge key copies).
func (b *builder) measure(v *val) built {
	if got, ok := b.merged[v]; ok {
		return got
	}
	out := built{v: v, size: 1, depth: 1}
	for _, c := range v.vals {
		got := b.measure(c)
		out.size = min(out.size+got.size, MaxNodes+1)
		out.depth = max(out.depth, got.depth+1)
	}
	b.merged[v] = out
	return out
}
