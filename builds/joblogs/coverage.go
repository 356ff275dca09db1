package joblogs

import (
	"bytes"
	"regexp"
	"strconv"
)

// coverageNumber is what GitLab takes out of the coverage regex's match: the first number.
var coverageNumber = regexp.MustCompile(`\d+(\.\d+)?`)

// ansiEscape is a terminal color sequence; runners color their own lines.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// ExtractCoverage applies a job's coverage regex (RE2, without slashes) to its log as
// GitLab does (Gitlab::Ci::Trace::Stream#extract_coverage): lines from the last one up;
// on the first line with a match, the last match (its last group when the regex has
// groups) and the first number in it. A line whose match holds no number is passed over.
// ok is false when nothing matched or the regex does not compile.
func ExtractCoverage(log []byte, regex string) (float64, bool) {
	c := newCoverageScanner(regex)
	if c == nil {
		return 0, false
	}
	_, _ = c.Write(log)
	return c.Result()
}

// maxCoverageLine bounds the line a coverage scanner holds: of a longer line (a progress
// bar redrawn with \r for minutes) it keeps the end, which is what the terminal showed.
const maxCoverageLine = 1 << 20

// coverageScanner finds a log's coverage while the log streams past it once (the archive
// computes it on its way to the store): the last line with a match wins, which is the
// first GitLab finds reading from the end.
type coverageScanner struct {
	re    *regexp.Regexp
	line  []byte
	found bool
	value float64
}

// newCoverageScanner returns nil when regex is empty or does not compile.
func newCoverageScanner(regex string) *coverageScanner {
	if regex == "" {
		return nil
	}
	re, err := regexp.Compile(regex)
	if err != nil {
		return nil
	}
	return &coverageScanner{re: re}
}

func (c *coverageScanner) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.hold(p)
			break
		}
		c.hold(p[:i])
		c.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// hold appends to the current line, keeping at most its last maxCoverageLine bytes.
func (c *coverageScanner) hold(p []byte) {
	if len(p) >= maxCoverageLine {
		c.line = append(c.line[:0], p[len(p)-maxCoverageLine:]...)
		return
	}
	if over := len(c.line) + len(p) - maxCoverageLine; over > 0 {
		c.line = append(c.line[:0], c.line[over:]...)
	}
	c.line = append(c.line, p...)
}

func (c *coverageScanner) endLine() {
	if v, ok := coverageOfLine(c.re, c.line); ok {
		c.value, c.found = v, true
	}
	c.line = c.line[:0]
}

// Result is the coverage of the log written so far, its last line included.
func (c *coverageScanner) Result() (float64, bool) {
	if len(c.line) > 0 {
		c.endLine()
	}
	return c.value, c.found
}

// coverageOfLine applies re to one line of a log as GitLab does.
func coverageOfLine(re *regexp.Regexp, line []byte) (float64, bool) {
	line = bytes.TrimRight(line, "\r")
	if i := bytes.LastIndexByte(line, '\r'); i >= 0 { // a progress line: what the terminal showed last
		line = line[i+1:]
	}
	line = ansiEscape.ReplaceAll(line, nil)
	all := re.FindAllSubmatch(line, -1)
	if len(all) == 0 {
		return 0, false
	}
	last := all[len(all)-1]
	text := last[len(last)-1]
	n := coverageNumber.Find(text)
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(n), 64)
	return v, err == nil
}
