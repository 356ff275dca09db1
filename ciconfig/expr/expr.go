// Package expr is GitLab's CI/CD variable expression language, the language of `rules:if`
// and `workflow:rules:if`: a hand-written lexer and a recursive-descent parser.
//
//	or      = and { "||" and }
//	and     = compare { "&&" compare }
//	compare = unary { ("==" | "!=" | "=~" | "!~") unary }
//	unary   = "!" unary | operand
//	operand = "(" or ")" | $NAME | "text" | 'text' | /regexp/flags | null | true | false
//
// It follows GitLab's evaluator (lib/gitlab/ci/pipeline/expression), including where that
// differs from what one might guess:
//   - a variable is written $NAME only; ${NAME} is a syntax error in GitLab and here.
//   - strings have no escapes: "a\"b" is not a string.
//   - an undefined variable is null; a defined empty one is "" (so `$V == null` is false).
//   - && and || return one of their operands with Ruby's truthiness, where only null and
//     false are false: `$EMPTY || $B` is "" (defined but empty) and so not true in the end
//     (GitLab issue 358775 describes this very result).
//   - the whole expression is true when its value is "present": true, a regexp, or a
//     string with a non-space character.
//   - =~ and !~ take a /regexp/ literal or a variable holding one ("/^v\d+/i"); a variable
//     holding anything else is compared as GitLab does, by substring (`$A =~ $B` is true
//     when B's text contains A's).
//   - regexps are RE2 (Go's regexp), as GitLab uses RE2; flags i, m, s and U.
//   - at most 100 tokens, as GitLab.
package expr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// MaxTokens is GitLab's limit on the tokens of one expression.
const MaxTokens = 100

// maxDepth bounds parenthesis nesting so that a hostile expression cannot exhaust the
// stack (100 tokens already bound it; this keeps the bound obvious).
const maxDepth = 50

// SyntaxError is why an expression does not parse. GitLab reports every such expression
// as "invalid expression syntax"; Detail says more.
type SyntaxError struct {
	Detail string
}

func (e *SyntaxError) Error() string { return "invalid expression syntax: " + e.Detail }

// Expr is a parsed expression, safe for concurrent use.
type Expr struct {
	root node
	src  string
}

// String returns the expression's source text.
func (e *Expr) String() string { return e.src }

// Lookup returns a variable's value and whether it is defined.
type Lookup func(name string) (value string, defined bool)

// Parse parses one expression; the error is a *SyntaxError.
func Parse(src string) (*Expr, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, &SyntaxError{Detail: "the expression is empty"}
	}
	p := parser{toks: toks}
	root, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, &SyntaxError{Detail: fmt.Sprintf("unexpected %s", p.toks[p.pos])}
	}
	return &Expr{root: root, src: src}, nil
}

// Eval evaluates the expression against the variables and reports whether it holds.
func (e *Expr) Eval(vars Lookup) bool {
	return e.root.eval(vars).present()
}

// Variables lists the variable names the expression reads, in order of first use.
func (e *Expr) Variables() []string {
	var names []string
	seen := map[string]bool{}
	var walk func(n node)
	walk = func(n node) {
		switch n := n.(type) {
		case variable:
			if !seen[string(n)] {
				seen[string(n)] = true
				names = append(names, string(n))
			}
		case not:
			walk(n.operand)
		case binary:
			walk(n.left)
			walk(n.right)
		}
	}
	walk(e.root)
	return names
}

// ---- values ----

type kind uint8

const (
	kNull kind = iota
	kString
	kBool
	kRegexp
)

// value is what a node evaluates to: GitLab's nil, String, true/false or a regexp.
type value struct {
	kind kind
	s    string // kString: the text; kRegexp: its /source/flags form
	b    bool
	re   *regexp.Regexp
}

// truthy is Ruby's truthiness: everything but nil and false.
func (v value) truthy() bool {
	return !(v.kind == kNull || v.kind == kBool && !v.b)
}

// present is Rails' present?: not nil, not false, not a blank string.
func (v value) present() bool {
	switch v.kind {
	case kNull:
		return false
	case kBool:
		return v.b
	case kString:
		return strings.TrimFunc(v.s, unicode.IsSpace) != ""
	}
	return true
}

// text is the operand of =~ as a string (Ruby's to_s).
func (v value) text() string {
	switch v.kind {
	case kBool:
		if v.b {
			return "true"
		}
		return "false"
	case kNull:
		return ""
	}
	return v.s
}

func equal(a, b value) bool {
	switch {
	case a.kind == kNull || b.kind == kNull:
		return a.kind == b.kind
	case a.kind == kBool && b.kind == kBool:
		return a.b == b.b
	case a.kind == kBool || b.kind == kBool:
		// GitLab compares a boolean with a string by its text ("true", "false").
		return a.text() == b.text() && a.kind != kRegexp && b.kind != kRegexp
	case a.kind == kRegexp || b.kind == kRegexp:
		return a.kind == b.kind && a.s == b.s
	}
	return a.s == b.s
}

// ---- syntax tree ----

type node interface {
	eval(vars Lookup) value
}

type literal value

func (l literal) eval(Lookup) value { return value(l) }

type variable string

func (v variable) eval(vars Lookup) value {
	if vars == nil {
		return value{}
	}
	s, ok := vars(string(v))
	if !ok {
		return value{}
	}
	return value{kind: kString, s: s}
}

type not struct{ operand node }

func (n not) eval(vars Lookup) value {
	return value{kind: kBool, b: !n.operand.eval(vars).present()}
}

type binary struct {
	op          tokenKind
	left, right node
}

func (n binary) eval(vars Lookup) value {
	switch n.op {
	case tAnd:
		if l := n.left.eval(vars); !l.truthy() {
			return l
		}
		return n.right.eval(vars)
	case tOr:
		if l := n.left.eval(vars); l.truthy() {
			return l
		}
		return n.right.eval(vars)
	case tEquals:
		return boolean(equal(n.left.eval(vars), n.right.eval(vars)))
	case tNotEquals:
		return boolean(!equal(n.left.eval(vars), n.right.eval(vars)))
	case tMatches, tNotMatches:
		text := n.left.eval(vars).text()
		pattern := n.right.eval(vars)
		if pattern.kind == kNull {
			return boolean(n.op == tNotMatches)
		}
		return boolean(matches(text, pattern) == (n.op == tMatches))
	}
	panic("expr: unknown operator " + n.op.String())
}

func boolean(b bool) value { return value{kind: kBool, b: b} }

// matches applies the right operand of =~ to text: a regexp; a string that spells one
// (a variable holding "/.../"); else, as GitLab does, a substring test of the string.
func matches(text string, pattern value) bool {
	switch pattern.kind {
	case kRegexp:
		return pattern.re.MatchString(text)
	case kString:
		if re, err := compileSpelled(pattern.s); err == nil {
			return re.MatchString(text)
		}
		return strings.Contains(pattern.s, text)
	}
	return strings.Contains(pattern.text(), text)
}

// CompileRegexp compiles a regexp written as GitLab writes them outside expressions
// ("/body/flags": only/except refs), with the rules of =~.
func CompileRegexp(s string) (*regexp.Regexp, error) { return compileSpelled(s) }

// compileSpelled compiles a regexp written as a whole string "/body/flags", the form a
// variable holds (GitLab's UntrustedRegexp::RubySyntax: the body runs to the last slash).
func compileSpelled(s string) (*regexp.Regexp, error) {
	if len(s) < 2 || s[0] != '/' {
		return nil, errors.New("not a /regexp/")
	}
	end := strings.LastIndexByte(s, '/')
	if end == 0 {
		return nil, errors.New("not a /regexp/")
	}
	flags := s[end+1:]
	if strings.Trim(flags, "ismU") != "" {
		return nil, errors.New("unknown regexp flags")
	}
	return compile(s[1:end], flags)
}

func compile(body, flags string) (*regexp.Regexp, error) {
	if flags != "" {
		body = "(?" + flags + ")" + body
	}
	return regexp.Compile(body)
}
