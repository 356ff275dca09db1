package ciconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Hostile or oversized input is refused with an *Error, quickly, before anything grows.
func TestLimits(t *testing.T) {
	t.Parallel()
	var jobs10k strings.Builder
	for i := range 10_000 {
		fmt.Fprintf(&jobs10k, "job-%d: {script: [echo %d]}\n", i, i)
	}
	var parallelMany strings.Builder
	for i := range 26 {
		fmt.Fprintf(&parallelMany, "job-%d: {script: x, parallel: 200}\n", i)
	}
	laughs := func(levels int, item func(prev string) string) string {
		var b strings.Builder
		b.WriteString(".l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
		for i := 1; i <= levels; i++ {
			prev := fmt.Sprintf("l%d", i-1)
			items := make([]string, 10)
			for k := range items {
				items[k] = item(prev)
			}
			fmt.Fprintf(&b, ".l%d: &l%d [%s]\n", i, i, strings.Join(items, ", "))
		}
		fmt.Fprintf(&b, "job: {script: [x]}\n")
		return b.String()
	}
	var refs strings.Builder // !reference multiplies the same way aliases do
	refs.WriteString(".r0: {s: [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&refs, ".r%d: {s: [", i)
		for k := range 10 {
			if k > 0 {
				refs.WriteString(", ")
			}
			fmt.Fprintf(&refs, "!reference [.r%d, s]", i-1)
		}
		refs.WriteString("]}\n")
	}
	refs.WriteString("job: {script: x}\n")
	var extendsFan strings.Builder // 5,000 jobs each extending a 200-value template
	extendsFan.WriteString(".tpl:\n  variables:\n")
	for i := range 200 {
		fmt.Fprintf(&extendsFan, "    V%d: v\n", i)
	}
	extendsFan.WriteString("  script: x\n")
	for i := range 5000 {
		fmt.Fprintf(&extendsFan, "j%d: {extends: .tpl}\n", i)
	}

	for _, tc := range []struct {
		name, src, want string
	}{
		{"10,000 jobs", jobs10k.String(), "the configuration defines 10000 jobs; at most 5000 are accepted"},
		{"5,200 parallel copies", parallelMany.String(), "the configuration defines 5200 jobs (parallel copies counted); at most 5000 are accepted"},
		{"billion laughs (aliases)", laughs(9, func(p string) string { return "*" + p }), "the configuration expands to more than 500000 values"},
		{"billion laughs (!reference)", refs.String(), "the configuration expands to more than 500000 values"},
		{"extends fan-out", extendsFan.String(), "the configuration expands to more than 500000 values"},
		{"deep nesting", "job:\n  script: x\n  variables: " + strings.Repeat("[", 150) + strings.Repeat("]", 150) + "\n", "nested more than 100 levels deep"},
		{"deep through an alias", ".deep: &d " + strings.Repeat("[", 60) + strings.Repeat("]", 60) + "\n.x: " + strings.Repeat("[", 60) + "*d" + strings.Repeat("]", 60) + "\njob: {script: x}\n", "nested more than 100 levels deep"},
		{"over 1 MiB", "job: {script: x}\n#" + strings.Repeat("x", MaxConfigBytes), "at most 1048576 (1 MiB) are accepted"},
		{"long job name", strings.Repeat("n", 300) + ": {script: x}\n", "is longer than 255 characters"},
		{"1,001 script lines", "job:\n  script:\n" + strings.Repeat("    - echo\n", 1001), "jobs:job:script config has 1001 lines; at most 1000 are accepted"},
		{"51 needs", "job: {script: x, needs: [" + strings.Repeat("a, ", 50) + "a]}\n", "jobs:job:needs config has 51 needs; at most 50 are allowed"},
		{"201 variables", "variables: {" + manyVars(201) + "}\njob: {script: x}\n", "jobs:job:variables the job has 201 variables with the global ones; at most 200 are accepted"},
	} {
		start := time.Now()
		_, err := Compile([]byte(tc.src), mainPush)
		took := time.Since(start)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Error(), tc.want) {
			t.Errorf("%s: %v, want an *Error containing %q", tc.name, err, tc.want)
		}
		if lint := Lint([]byte(tc.src), mainPush, true); lint.Valid {
			t.Errorf("%s: Lint says valid", tc.name)
		}
		t.Logf("%s: refused in %v", tc.name, took)
	}
}

func manyVars(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("V%d: x", i)
	}
	return strings.Join(parts, ", ")
}

// A deep but legal extends chain and a 5,000-job file are accepted.
func TestLimitsAccept(t *testing.T) {
	t.Parallel()
	var chain strings.Builder
	chain.WriteString(".l0: {script: x}\n")
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&chain, ".l%d: {extends: .l%d, variables: {L%d: x}}\n", i, i-1, i)
	}
	chain.WriteString("job: {extends: .l10}\n") // job + ten templates with extends + a base: GitLab's deepest
	res := mustCompile(t, chain.String(), mainPush)
	if len(res.Jobs[0].Variables) != 10 {
		t.Errorf("chain variables %v", res.Jobs[0].Variables)
	}
	var jobs5k strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&jobs5k, "job-%d: {script: [echo %d]}\n", i, i)
	}
	start := time.Now()
	res = mustCompile(t, jobs5k.String(), mainPush)
	t.Logf("5,000 jobs: %v", time.Since(start))
	if len(res.Jobs) != 5000 {
		t.Errorf("%d jobs", len(res.Jobs))
	}
}
