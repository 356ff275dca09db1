package builds

import (
	"bytes"
	"context"
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
	re, err := regexp.Compile(regex)
	if err != nil || regex == "" {
		return 0, false
	}
	rest := log
	for len(rest) > 0 {
		line := rest
		if i := bytes.LastIndexByte(bytes.TrimSuffix(rest, []byte("\n")), '\n'); i >= 0 {
			line, rest = rest[i+1:], rest[:i]
		} else {
			rest = nil
		}
		line = bytes.TrimRight(line, "\r\n")
		if bytes.IndexByte(line, '\r') >= 0 { // a progress line: what the terminal showed last
			line = line[bytes.LastIndexByte(line, '\r')+1:]
		}
		line = ansiEscape.ReplaceAll(line, nil)
		all := re.FindAllSubmatch(line, -1)
		if len(all) == 0 {
			continue
		}
		last := all[len(all)-1]
		text := last[len(last)-1]
		if n := coverageNumber.Find(text); n != nil {
			v, err := strconv.ParseFloat(string(n), 64)
			if err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

// Coverage is GitLab's pipeline coverage: the average of its latest jobs' coverage; ok is
// false when none has one (or the pipeline was read without its builds).
func (p Pipeline) Coverage() (float64, bool) {
	sum, n := 0.0, 0
	for _, b := range p.Builds {
		if b.RetriedBy == 0 && b.Coverage != nil {
			sum += *b.Coverage
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// recordCoverage reads a finished build's log and stores its coverage, for builds whose
// payload has a coverage regex only (the others pay nothing). The finish is committed
// already: a failure here is logged, as the coverage is a report, not the job's outcome.
func (s *Service) recordCoverage(ctx context.Context, b Build) {
	if b.Payload.CoverageRegex == "" {
		return
	}
	log, err := s.wholeLog(ctx, b.ID)
	if err != nil {
		s.log.WarnContext(ctx, "coverage not read: log unreadable", "build_id", b.ID, "error", err)
		return
	}
	v, ok := ExtractCoverage(log, b.Payload.CoverageRegex)
	if !ok {
		return
	}
	if err := s.store.SetCoverage(ctx, b.ID, v); err != nil {
		s.log.WarnContext(ctx, "coverage not recorded", "build_id", b.ID, "error", err)
	}
}
