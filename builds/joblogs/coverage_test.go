package joblogs

import "testing"

func TestExtractCoverage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, log, regex string
		want             float64
		ok               bool
	}{
		{"last matching line wins", "Coverage: 10%\nCoverage: 20.5%\nend\n", `Coverage: \d+(?:\.\d+)?%`, 20.5, true},
		{"last match of the line, its group", "a 1% b 2% c 30.25%", `(\d+\.?\d*)%`, 30.25, true},
		{"first number of the match", "Lines: 80.0% (800/1000)", `Lines: .*`, 80.0, true},
		{"a match without a number is passed over", "Cov: 40%\nCov: none\n", `Cov: \S+`, 40, true},
		{"colors stripped", "\x1b[32mTOTAL 93%\x1b[0m\n", `TOTAL (\d+)%`, 93, true},
		{"progress line: what was shown last", "cov 10%\rcov 55%\n", `cov (\d+)%`, 55, true},
		{"no final newline", "x\nTotal: 71.4", `Total: [\d.]+`, 71.4, true},
		{"no match", "nothing\n", `Coverage: (\d+)`, 0, false},
		{"invalid regex", "Coverage: 1", `(`, 0, false},
		{"empty log", "", `.*`, 0, false},
	} {
		got, ok := ExtractCoverage([]byte(c.log), c.regex)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: ExtractCoverage = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
