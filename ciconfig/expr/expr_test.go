package expr

import (
	"errors"
	"strings"
	"testing"
)

func vars(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func TestEval(t *testing.T) {
	t.Parallel()
	env := vars(
		"CI_COMMIT_BRANCH", "main",
		"CI_COMMIT_TAG", "",
		"CI_PIPELINE_SOURCE", "push",
		"CI_COMMIT_REF_NAME", "feature/login",
		"RELEASE", "v1.2.3",
		"EMPTY", "",
		"BLANK", "  ",
		"B", "1",
		"PATTERN", "/^v\\d+/",
		"PATTERN_I", "/^FEATURE/i",
		"PLAIN", "feature/login-and-more",
		"SLASHED", "a/b",
	)
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{`$CI_COMMIT_BRANCH == "main"`, true},
		{`$CI_COMMIT_BRANCH == 'main'`, true},
		{`$CI_COMMIT_BRANCH != "main"`, false},
		{`$CI_COMMIT_BRANCH == "develop"`, false},
		{`$UNDEFINED == null`, true},
		{`$EMPTY == null`, false}, // defined but empty is not null
		{`$EMPTY == ""`, true},
		{`$UNDEFINED == ""`, false},
		{`$CI_COMMIT_BRANCH`, true},
		{`$EMPTY`, false},
		{`$BLANK`, false}, // present? is false for whitespace
		{`$UNDEFINED`, false},
		{`$CI_COMMIT_REF_NAME =~ /^feature\//`, true},
		{`$CI_COMMIT_REF_NAME =~ /^FEATURE/`, false},
		{`$CI_COMMIT_REF_NAME =~ /^FEATURE/i`, true},
		{`$CI_COMMIT_REF_NAME !~ /^feature/`, false},
		{`$RELEASE =~ /^v\d+\.\d+\.\d+$/`, true},
		{`$RELEASE =~ $PATTERN`, true}, // a variable holding a /regexp/
		{`$CI_COMMIT_REF_NAME =~ $PATTERN_I`, true},
		{`$CI_COMMIT_REF_NAME =~ $PLAIN`, true}, // not a regexp: substring of the right side
		{`$PLAIN =~ $CI_COMMIT_REF_NAME`, false},
		{`$RELEASE =~ $UNDEFINED`, false},
		{`$RELEASE !~ $UNDEFINED`, true},
		{`$UNDEFINED =~ /^$/`, true}, // null is matched as ""
		{`$SLASHED =~ /a\/b/`, true},
		{`$CI_COMMIT_BRANCH == "main" && $CI_PIPELINE_SOURCE == "push"`, true},
		{`$CI_COMMIT_BRANCH == "main" && $CI_PIPELINE_SOURCE == "web"`, false},
		{`$CI_COMMIT_BRANCH == "dev" || $CI_PIPELINE_SOURCE == "push"`, true},
		// && binds tighter than ||
		{`$CI_COMMIT_BRANCH == "dev" && $B == "2" || $B == "1"`, true},
		{`$B == "1" || $CI_COMMIT_BRANCH == "dev" && $B == "2"`, true},
		{`($B == "1" || $CI_COMMIT_BRANCH == "dev") && $B == "2"`, false},
		{`(($B == "1"))`, true},
		{`$CI_COMMIT_TAG || $CI_COMMIT_BRANCH == "main"`, false}, // "" is Ruby-truthy: || yields "" (GitLab issue 358775)
		{`$CI_COMMIT_BRANCH == "main" || $CI_COMMIT_TAG`, true},
		{`$UNDEFINED || $CI_COMMIT_BRANCH == "main"`, true},
		{`$B && $CI_COMMIT_BRANCH`, true},
		{`$UNDEFINED && $CI_COMMIT_BRANCH`, false},
		{`!$UNDEFINED`, true},
		{`!$B`, false},
		{`!($B == "2")`, true},
		{`$B == "1" == true`, true},
		{`  $B   ==   "1"  `, true},
		{`"a" == "a"`, true},
		{`null == null`, true},
		{`$B == ''`, false},
	} {
		e, err := Parse(tc.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.src, err)
			continue
		}
		if got := e.Eval(env); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, detail string }{
		{``, "empty"},
		{`   `, "empty"},
		{`${CI_COMMIT_BRANCH} == "main"`, "write $NAME"},
		{`$ == "a"`, "without a variable name"},
		{`$A == "main`, "no closing"},
		{`$A =~ /abc`, "no closing /"},
		{`$A =~ //`, "empty regexp"},
		{`$A =~ /(unclosed/`, "invalid regular expression"},
		{`$A =~ /a(?=b)/`, "invalid regular expression"}, // lookahead: not RE2
		{`$A == `, "ends where a value"},
		{`== $A`, "unexpected"},
		{`$A $B`, "unexpected"},
		{`($A == "1"`, "not closed"},
		{`$A == "1")`, "unexpected"},
		{`$A = "1"`, "unknown lexeme"},
		{`$A > 1`, "unknown lexeme"},
		{`$A == "1" and $B`, "unknown lexeme"},
		{`$A && || $B`, "unexpected"},
		{strings.Repeat(`$A && `, 50) + `$A`, "more than 100 tokens"},
		{strings.Repeat(`(`, 60) + `$A` + strings.Repeat(`)`, 60), "more than 100 tokens"},
		{strings.Repeat(`(`, 49) + `$A` + strings.Repeat(`)`, 49), ""}, // 99 tokens, 49 levels: fine
		{strings.Repeat(`!`, 99) + `$A`, "too deeply nested"},
	} {
		e, err := Parse(tc.src)
		if tc.detail == "" {
			if err != nil {
				t.Errorf("Parse(%.30q…): %v, want no error", tc.src, err)
			}
			continue
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%.40q) = %v, %v; want a SyntaxError containing %q", tc.src, e, err, tc.detail)
			continue
		}
		if !strings.Contains(se.Error(), tc.detail) || !strings.HasPrefix(se.Error(), "invalid expression syntax") {
			t.Errorf("Parse(%.40q): %q, want it to contain %q", tc.src, se.Error(), tc.detail)
		}
	}
}

func TestVariables(t *testing.T) {
	t.Parallel()
	e, err := Parse(`$A == "x" && ($B =~ /y/ || !$A) && $C`)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(e.Variables(), ",")
	if got != "A,B,C" {
		t.Fatalf("Variables() = %s, want A,B,C", got)
	}
	if e.String() != `$A == "x" && ($B =~ /y/ || !$A) && $C` {
		t.Fatalf("String() = %q", e.String())
	}
}

// FuzzParseExpression: no input makes Parse or Eval panic or loop; what parses evaluates
// to the same answer twice, and more than MaxTokens tokens never parse.
func FuzzParseExpression(f *testing.F) {
	for _, seed := range []string{
		`$CI_COMMIT_BRANCH == "main"`,
		`$CI_COMMIT_TAG =~ /^v\d+\.\d+/i && $CI_PIPELINE_SOURCE != "schedule"`,
		`($A || $B) && !$C`,
		`$A =~ $PATTERN`,
		`$A == null || $B == 'x'`,
		`/a\/b/ =~ $A`,
		`((((($A)))))`,
		`$A =~ /[/`,
	} {
		f.Add(seed, "main", "/^m/")
	}
	f.Fuzz(func(t *testing.T, src, a, pattern string) {
		e, err := Parse(src)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error %T %v, want *SyntaxError", src, err, err)
			}
			return
		}
		if toks, _ := lex(src); len(toks) > MaxTokens {
			t.Fatalf("Parse(%q) accepted %d tokens", src, len(toks))
		}
		env := vars("A", a, "B", "", "PATTERN", pattern, "CI_COMMIT_BRANCH", a)
		first, second := e.Eval(env), e.Eval(env)
		if first != second {
			t.Fatalf("Eval(%q) is not deterministic", src)
		}
		e.Eval(nil)
	})
}
