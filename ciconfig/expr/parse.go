package expr

import "fmt"

// parser is a recursive-descent parser over the tokens; precedence from loosest to
// tightest: ||, &&, the comparisons (left-associative, as GitLab's shunting-yard), !.
type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *parser) or(depth int) (node, error) {
	left, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for {
		t, ok := p.peek()
		if !ok || t.kind != tOr {
			return left, nil
		}
		p.pos++
		right, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		left = binary{op: tOr, left: left, right: right}
	}
}

func (p *parser) and(depth int) (node, error) {
	left, err := p.compare(depth)
	if err != nil {
		return nil, err
	}
	for {
		t, ok := p.peek()
		if !ok || t.kind != tAnd {
			return left, nil
		}
		p.pos++
		right, err := p.compare(depth)
		if err != nil {
			return nil, err
		}
		left = binary{op: tAnd, left: left, right: right}
	}
}

func (p *parser) compare(depth int) (node, error) {
	left, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for {
		t, ok := p.peek()
		if !ok || (t.kind != tEquals && t.kind != tNotEquals && t.kind != tMatches && t.kind != tNotMatches) {
			return left, nil
		}
		p.pos++
		right, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		left = binary{op: t.kind, left: left, right: right}
	}
}

func (p *parser) unary(depth int) (node, error) {
	t, ok := p.peek()
	if ok && t.kind == tNot {
		if depth >= maxDepth {
			return nil, &SyntaxError{Detail: "too deeply nested"}
		}
		p.pos++
		operand, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return not{operand: operand}, nil
	}
	return p.operand(depth)
}

func (p *parser) operand(depth int) (node, error) {
	t, ok := p.peek()
	if !ok {
		return nil, &SyntaxError{Detail: "the expression ends where a value is expected"}
	}
	p.pos++
	switch t.kind {
	case tVariable:
		return variable(t.text), nil
	case tString:
		return literal{kind: kString, s: t.text}, nil
	case tNull:
		return literal{}, nil
	case tTrue, tFalse:
		return literal{kind: kBool, b: t.kind == tTrue}, nil
	case tPattern:
		re, err := compile(t.text, t.flag)
		if err != nil {
			return nil, &SyntaxError{Detail: fmt.Sprintf("invalid regular expression /%s/%s: %v", t.text, t.flag, err)}
		}
		return literal{kind: kRegexp, s: "/" + t.text + "/" + t.flag, re: re}, nil
	case tOpen:
		if depth >= maxDepth {
			return nil, &SyntaxError{Detail: "too deeply nested"}
		}
		inner, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		closing, ok := p.peek()
		if !ok || closing.kind != tClose {
			return nil, &SyntaxError{Detail: fmt.Sprintf("( at %d is not closed", t.at+1)}
		}
		p.pos++
		return inner, nil
	}
	return nil, &SyntaxError{Detail: fmt.Sprintf("unexpected %s where a value is expected", t)}
}
