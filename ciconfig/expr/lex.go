package expr

import (
	"fmt"
	"strings"
)

type tokenKind uint8

const (
	tOpen tokenKind = iota + 1
	tClose
	tVariable
	tString
	tPattern
	tNull
	tTrue
	tFalse
	tEquals
	tNotEquals
	tMatches
	tNotMatches
	tAnd
	tOr
	tNot
)

var tokenNames = [...]string{tOpen: "(", tClose: ")", tVariable: "variable", tString: "string",
	tPattern: "regexp", tNull: "null", tTrue: "true", tFalse: "false", tEquals: "==",
	tNotEquals: "!=", tMatches: "=~", tNotMatches: "!~", tAnd: "&&", tOr: "||", tNot: "!"}

func (k tokenKind) String() string {
	if int(k) < len(tokenNames) && tokenNames[k] != "" {
		return tokenNames[k]
	}
	return fmt.Sprintf("token(%d)", int(k))
}

type token struct {
	kind tokenKind
	text string // variable name, string content or regexp body
	flag string // regexp flags
	at   int    // byte offset in the source, for messages
}

func (t token) String() string {
	switch t.kind {
	case tVariable:
		return fmt.Sprintf("$%s at %d", t.text, t.at+1)
	case tString:
		return fmt.Sprintf("string %q at %d", t.text, t.at+1)
	case tPattern:
		return fmt.Sprintf("regexp /%s/%s at %d", t.text, t.flag, t.at+1)
	}
	return fmt.Sprintf("%q at %d", t.kind.String(), t.at+1)
}

// operators in the order GitLab's lexer tries them: "==" before "=~", "!=" and "!~" before "!".
var operators = []struct {
	text string
	kind tokenKind
}{
	{"==", tEquals}, {"=~", tMatches}, {"!=", tNotEquals}, {"!~", tNotMatches},
	{"&&", tAnd}, {"||", tOr}, {"!", tNot},
}

func isWord(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// lex splits src into tokens, as GitLab's Lexer: whitespace between tokens is ignored, and
// the first lexeme that matches at a position wins.
func lex(src string) ([]token, error) {
	var toks []token
	i := 0
	for {
		for i < len(src) && isSpace(src[i]) {
			i++
		}
		if i >= len(src) {
			return toks, nil
		}
		if len(toks) == MaxTokens {
			return nil, &SyntaxError{Detail: fmt.Sprintf("more than %d tokens", MaxTokens)}
		}
		t, next, err := lexOne(src, i)
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
		i = next
	}
}

func lexOne(src string, i int) (token, int, error) {
	c := src[i]
	switch {
	case c == '(':
		return token{kind: tOpen, at: i}, i + 1, nil
	case c == ')':
		return token{kind: tClose, at: i}, i + 1, nil
	case c == '$':
		j := i + 1
		for j < len(src) && isWord(src[j]) {
			j++
		}
		if j == i+1 {
			if j < len(src) && src[j] == '{' {
				return token{}, 0, &SyntaxError{Detail: fmt.Sprintf("${...} at %d: write $NAME (GitLab reads no braces in rules:if)", i+1)}
			}
			return token{}, 0, &SyntaxError{Detail: fmt.Sprintf("$ without a variable name at %d", i+1)}
		}
		return token{kind: tVariable, text: src[i+1 : j], at: i}, j, nil
	case c == '"' || c == '\'':
		end := strings.IndexByte(src[i+1:], c)
		if end < 0 {
			return token{}, 0, &SyntaxError{Detail: fmt.Sprintf("string at %d has no closing %c", i+1, c)}
		}
		return token{kind: tString, text: src[i+1 : i+1+end], at: i}, i + 2 + end, nil
	case c == '/':
		return lexPattern(src, i)
	}
	for _, w := range [...]struct {
		text string
		kind tokenKind
	}{{"null", tNull}, {"true", tTrue}, {"false", tFalse}} {
		if strings.HasPrefix(src[i:], w.text) {
			end := i + len(w.text)
			if end == len(src) || !isWord(src[end]) {
				return token{kind: w.kind, at: i}, end, nil
			}
		}
	}
	for _, op := range operators {
		if strings.HasPrefix(src[i:], op.text) {
			return token{kind: op.kind, at: i}, i + len(op.text), nil
		}
	}
	return token{}, 0, &SyntaxError{Detail: fmt.Sprintf("unknown lexeme %q at %d", clip(src[i:]), i+1)}
}

// lexPattern reads /body/flags: the body runs to the first slash not escaped by a
// backslash; "\/" stands for a slash. Flags are GitLab's: i, s, m, U.
func lexPattern(src string, i int) (token, int, error) {
	var body strings.Builder
	j := i + 1
	for ; j < len(src); j++ {
		c := src[j]
		if c == '\\' && j+1 < len(src) {
			if src[j+1] == '/' {
				body.WriteByte('/')
			} else {
				body.WriteByte('\\')
				body.WriteByte(src[j+1])
			}
			j++
			continue
		}
		if c == '/' {
			break
		}
		body.WriteByte(c)
	}
	if j >= len(src) {
		return token{}, 0, &SyntaxError{Detail: fmt.Sprintf("regexp at %d has no closing /", i+1)}
	}
	if body.Len() == 0 {
		return token{}, 0, &SyntaxError{Detail: fmt.Sprintf("empty regexp at %d", i+1)}
	}
	k := j + 1
	for k < len(src) && strings.IndexByte("ismU", src[k]) >= 0 {
		k++
	}
	return token{kind: tPattern, text: body.String(), flag: src[j+1 : k], at: i}, k, nil
}

func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}
