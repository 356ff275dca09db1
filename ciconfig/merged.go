package ciconfig

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// mergedYAML prints the configuration as GitLab's lint shows it (merged_yaml): after
// anchors, extends and !reference, with .pre and .post in stages when stages is given.
// Hidden jobs stay; defaults are not copied into jobs.
//
// It has its own small emitter: the YAML library's took half of a 2,000-job Compile. What
// it writes reads back as the same values (a test and the fuzz target check it): block
// collections, plain scalars where Psych and YAML 1.2 both read them as the same string,
// literal blocks for multi-line text, double quotes otherwise.
func mergedYAML(tree *val, stages []string) string {
	var e emitter
	e.b.Grow(64 * len(tree.keys))
	e.b.WriteString("---\n")
	for i, k := range tree.keys {
		v := tree.vals[i]
		if k == "stages" || (k == "types" && !tree.has("stages")) {
			v = &val{kind: vSeq}
			for _, s := range stages {
				v.vals = append(v.vals, &val{kind: vString, text: s})
			}
		}
		e.key(k)
		e.value(v, 2)
	}
	return e.b.String()
}

type emitter struct {
	b strings.Builder
}

func (e *emitter) indent(n int) {
	for range n {
		e.b.WriteByte(' ')
	}
}

func (e *emitter) key(k string) {
	e.scalarText(k, -1)
	e.b.WriteByte(':')
}

// value writes v after a "key:" or "-" already written, then a newline; nested block
// collections go at indent.
func (e *emitter) value(v *val, indent int) {
	switch v.kind {
	case vMap:
		if len(v.keys) == 0 {
			e.b.WriteString(" {}\n")
			return
		}
		e.b.WriteByte('\n')
		for i, k := range v.keys {
			e.indent(indent)
			e.key(k)
			e.value(v.vals[i], indent+2)
		}
	case vSeq, vRef:
		if len(v.vals) == 0 {
			e.b.WriteString(" []\n")
			return
		}
		e.b.WriteByte('\n')
		for _, item := range v.vals {
			e.indent(indent)
			e.b.WriteByte('-')
			e.value(item, indent+2)
		}
	case vNull:
		e.b.WriteString(" null\n")
	case vFloat:
		e.b.WriteByte(' ')
		switch v.text {
		case "Infinity":
			e.b.WriteString(".inf")
		case "-Infinity":
			e.b.WriteString("-.inf")
		case "NaN":
			e.b.WriteString(".nan")
		default:
			e.b.WriteString(v.text)
		}
		e.b.WriteByte('\n')
	case vBool, vInt:
		e.b.WriteByte(' ')
		e.b.WriteString(v.text)
		e.b.WriteByte('\n')
	default:
		e.b.WriteByte(' ')
		e.scalarText(v.text, indent)
		e.b.WriteByte('\n')
	}
}

// scalarText writes a string: plain when safe, a literal block for multi-line text
// (indent >= 0: not a key), else double-quoted.
func (e *emitter) scalarText(s string, indent int) {
	switch {
	case plainSafe(s):
		e.b.WriteString(s)
	case indent >= 0 && literalSafe(s):
		e.b.WriteByte('|')
		body := strings.TrimRight(s, "\n")
		switch trailing := len(s) - len(body); trailing {
		case 0:
			e.b.WriteByte('-')
		case 1:
		default:
			e.b.WriteByte('+')
		}
		for _, line := range strings.Split(s[:len(body)+max(0, len(s)-len(body)-1)], "\n") {
			e.b.WriteByte('\n')
			if line != "" {
				e.indent(indent)
				e.b.WriteString(line)
			}
		}
	default:
		e.b.WriteString(strconv.Quote(s))
	}
}

var looksTyped = regexp.MustCompile(`^(?:[-+]?[0-9][0-9_,:.]*(?:[eE][-+]?[0-9]+)?|[-+]?\.[0-9].*|0[xob].*|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}.*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)

// plainSafe: s reads back as this very string, unquoted, in Psych (YAML 1.1) and YAML 1.2.
func plainSafe(s string) bool {
	if s == "" || s != strings.TrimSpace(s) || looksTyped.MatchString(s) {
		return false
	}
	switch strings.ToLower(s) {
	case "~", "null", "yes", "no", "true", "false", "on", "off", "y", "n", "<<", "=":
		return false
	}
	switch s[0] {
	case '-', '?', ':':
		if len(s) == 1 || s[1] == ' ' {
			return false
		}
	case ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	}
	if strings.HasSuffix(s, ":") || strings.Contains(s, ": ") || strings.Contains(s, " #") {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || !unicode.IsPrint(r) && r != ' ' || r == '\ufeff' {
			return false
		}
	}
	return true
}

// literalSafe: s can be a literal block: several lines, printable, the first not
// starting with a space (which would need an indentation indicator).
func literalSafe(s string) bool {
	if !strings.Contains(s, "\n") || strings.HasPrefix(s, " ") || strings.HasPrefix(s, "\n") {
		return false
	}
	for _, r := range s {
		if r != '\n' && (r < ' ' || r == 0x7f || !unicode.IsPrint(r) && r != ' ' || r == '\ufeff') {
			return false
		}
	}
	return true
}
