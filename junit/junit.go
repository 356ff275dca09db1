// Package junit reads JUnit XML test reports (artifacts:reports:junit) into test cases, the
// way GitLab reads them for a pipeline's test report. It knows only the standard library.
//
// A report is what gitlab-runner uploads: one or more XML documents one after the other
// (each matched file of the job, gzip members the caller has already decompressed), each
// rooted at <testsuites> or at a bare <testsuite>, suites nesting in suites (Maven
// surefire, Jest). Only <testcase> elements count; the counts on <testsuite> attributes
// are not trusted (GitLab counts the cases too).
package junit

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Test case statuses, GitLab's words.
const (
	StatusSuccess = "success"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
	StatusError   = "error"
)

// Case is one <testcase>.
type Case struct {
	Status    string
	Name      string
	Classname string
	File      string
	// Time is the time attribute in seconds (0 when absent or not a number).
	Time float64
	// SystemOutput is what GitLab shows as the case's output: the message and text of its
	// <failure>, <error> or <skipped>, then its <system-out>; "" when it has none.
	SystemOutput string
	// StackTrace is the text of a <failure> or <error> (where JUnit writers put the trace).
	StackTrace string
}

// Limits bound what one report may cost: the bytes, elements and depth bound the time and
// memory of reading it (the XML decoder keeps a record per open element), the cases and
// texts what is kept of it.
type Limits struct {
	// MaxBytes is the most bytes of XML read (the decompressed stream); past it the
	// report is refused.
	MaxBytes int64
	// MaxElements is the most XML elements read; past it the report is refused.
	MaxElements int
	// MaxDepth is the deepest elements may nest; deeper, the report is refused.
	MaxDepth int
	// MaxCases is the most test cases returned; past it the report is refused.
	MaxCases int
	// MaxText is the most bytes kept of each text (output, trace); longer ones are cut.
	MaxText int
}

// DefaultLimits are GitLab's order of magnitude: 30 MB of XML, 100,000 cases, 64 KiB
// texts; half a million elements (five a case at the most cases) and 256 levels (libxml2's
// default, which GitLab's parser has).
var DefaultLimits = Limits{MaxBytes: 30 << 20, MaxElements: 500_000, MaxDepth: 256, MaxCases: 100_000, MaxText: 64 << 10}

// TooLargeError: the report's XML is longer than Limits.MaxBytes.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the report is larger than %d bytes of XML", e.Limit)
}

// TooManyElementsError: the report has more than Limits.MaxElements elements.
type TooManyElementsError struct{ Limit int }

func (e *TooManyElementsError) Error() string {
	return fmt.Sprintf("the report is too large: it has more than %d XML elements", e.Limit)
}

// TooDeepError: the report's elements nest deeper than Limits.MaxDepth.
type TooDeepError struct {
	Limit int
	Line  int
}

func (e *TooDeepError) Error() string {
	return fmt.Sprintf("the report is too deep: its elements nest more than %d levels deep (line %d)", e.Limit, e.Line)
}

// TooManyCasesError: the report has more than Limits.MaxCases test cases.
type TooManyCasesError struct{ Limit int }

func (e *TooManyCasesError) Error() string {
	return fmt.Sprintf("the report has more than %d test cases", e.Limit)
}

// Parse reads a report's XML documents from r, streaming token by token, and returns their
// test cases in document order. Malformed XML, a root other than <testsuites> or
// <testsuite>, or a report past lim is an error naming what and where; no cases are
// returned with it. The limits are checked as each element opens, so a report past them
// costs no more than the limits allow before it is refused.
func Parse(r io.Reader, lim Limits) ([]Case, error) {
	lr := &limitReader{r: r, left: lim.MaxBytes}
	if lim.MaxBytes <= 0 {
		lr.left = -1
	}
	d := xml.NewDecoder(lr)
	d.CharsetReader = charsetReader
	var cases []Case
	var tc *caseReader // the <testcase> being read
	depth, roots, elements := 0, 0, 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if lr.over {
				return nil, &TooLargeError{Limit: lim.MaxBytes}
			}
			return nil, fmt.Errorf("JUnit XML parsing failed: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			elements++
			if lim.MaxDepth > 0 && depth > lim.MaxDepth {
				line, _ := d.InputPos()
				return nil, &TooDeepError{Limit: lim.MaxDepth, Line: line}
			}
			if lim.MaxElements > 0 && elements > lim.MaxElements {
				return nil, &TooManyElementsError{Limit: lim.MaxElements}
			}
			switch {
			case depth == 1:
				roots++
				if t.Name.Local != "testsuites" && t.Name.Local != "testsuite" {
					line, _ := d.InputPos()
					return nil, fmt.Errorf("JUnit XML parsing failed: line %d: the root element is <%s>, want <testsuites> or <testsuite>", line, clip(t.Name.Local))
				}
			case tc != nil:
				tc.start(t, depth)
			case t.Name.Local == "testcase":
				if lim.MaxCases > 0 && len(cases) >= lim.MaxCases {
					return nil, &TooManyCasesError{Limit: lim.MaxCases}
				}
				tc = newCaseReader(t, depth)
			}
		case xml.EndElement:
			if tc != nil {
				if depth == tc.depth {
					cases = append(cases, tc.raw.toCase(lim.MaxText))
					tc = nil
				} else {
					tc.end(depth)
				}
			}
			depth--
		case xml.CharData:
			switch {
			case tc != nil:
				tc.text(t, depth)
			case depth == 0 && len(bytes.TrimSpace(t)) > 0:
				line, _ := d.InputPos()
				return nil, fmt.Errorf("JUnit XML parsing failed: line %d: text outside the root element", line)
			}
		}
	}
	if roots == 0 {
		return nil, errors.New("JUnit XML parsing failed: the report has no <testsuites> or <testsuite> element")
	}
	return cases, nil
}

// caseReader fills a rawCase from the tokens of one <testcase> as they come, the way
// encoding/xml would unmarshal it (attributes and children by local name, the text directly
// inside a child, a repeated result element read again into the same result), without the
// recursion of its Unmarshal, whose stack a deep element would grow.
type caseReader struct {
	depth int // the <testcase>'s
	raw   rawCase
	// into is where the text of the open child goes (nil: nowhere); out is the
	// system-out or system-err it belongs to.
	into *string
	out  *[]string
	buf  []byte
}

func newCaseReader(t xml.StartElement, depth int) *caseReader {
	c := &caseReader{depth: depth}
	for _, a := range t.Attr {
		switch a.Name.Local {
		case "name":
			c.raw.Name = a.Value
		case "classname":
			c.raw.Classname = a.Value
		case "file":
			c.raw.File = a.Value
		case "time":
			c.raw.Time = a.Value
		}
	}
	return c
}

// start opens an element inside the case: a child it reads, or one it skips.
func (c *caseReader) start(t xml.StartElement, depth int) {
	if depth != c.depth+1 {
		return // inside a child: its text is not the child's own, as for Unmarshal
	}
	var result **rawResult
	switch t.Name.Local {
	case "failure":
		result = &c.raw.Failure
	case "error":
		result = &c.raw.Error
	case "skipped":
		result = &c.raw.Skipped
	case "ignored":
		result = &c.raw.Ignored
	case "system-out":
		c.out, c.buf = &c.raw.SystemOut, c.buf[:0]
		return
	case "system-err":
		c.out, c.buf = &c.raw.SystemErr, c.buf[:0]
		return
	default:
		return
	}
	if *result == nil {
		*result = &rawResult{}
	}
	for _, a := range t.Attr {
		switch a.Name.Local {
		case "message":
			(*result).Message = a.Value
		case "type":
			(*result).Type = a.Value
		}
	}
	c.into, c.buf = &(*result).Text, c.buf[:0]
}

// text keeps character data directly inside the open child.
func (c *caseReader) text(t xml.CharData, depth int) {
	if depth == c.depth+1 && (c.into != nil || c.out != nil) {
		c.buf = append(c.buf, t...)
	}
}

// end closes an element inside the case; a child's end sets its text.
func (c *caseReader) end(depth int) {
	if depth != c.depth+1 {
		return
	}
	switch {
	case c.into != nil:
		*c.into = string(c.buf)
	case c.out != nil:
		*c.out = append(*c.out, string(c.buf))
	}
	c.into, c.out = nil, nil
}

// rawCase is a <testcase> as it is written. Writers differ: pytest puts the trace in the
// text of <failure message=…>, go-junit-report the test's output there, surefire adds
// <system-out>/<system-err>; some mark skips with <skipped/>, JUnit 4 ant with <ignored/>.
type rawCase struct {
	Name      string     `xml:"name,attr"`
	Classname string     `xml:"classname,attr"`
	File      string     `xml:"file,attr"`
	Time      string     `xml:"time,attr"`
	Failure   *rawResult `xml:"failure"`
	Error     *rawResult `xml:"error"`
	Skipped   *rawResult `xml:"skipped"`
	Ignored   *rawResult `xml:"ignored"`
	SystemOut []string   `xml:"system-out"`
	SystemErr []string   `xml:"system-err"`
}

type rawResult struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func (r rawCase) toCase(maxText int) Case {
	c := Case{Status: StatusSuccess, Name: r.Name, Classname: r.Classname, File: r.File, Time: parseTime(r.Time)}
	var result *rawResult
	switch {
	case r.Failure != nil:
		c.Status, result = StatusFailed, r.Failure
	case r.Error != nil:
		c.Status, result = StatusError, r.Error
	case r.Skipped != nil:
		c.Status, result = StatusSkipped, r.Skipped
	case r.Ignored != nil:
		c.Status, result = StatusSkipped, r.Ignored
	}
	var out []string
	if result != nil {
		text := strings.TrimSpace(result.Text)
		if result.Message != "" {
			out = append(out, result.Message)
		}
		if text != "" && text != result.Message {
			out = append(out, text)
		}
		if c.Status == StatusFailed || c.Status == StatusError {
			c.StackTrace = clipText(text, maxText)
		}
	}
	for _, s := range r.SystemOut {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	c.SystemOutput = clipText(strings.Join(out, "\n\n"), maxText)
	return c
}

// parseTime reads a time attribute: seconds as a decimal, some writers with a thousands
// separator ("1,234.5"); anything else is 0, as GitLab takes it.
func parseTime(s string) float64 {
	f, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 64)
	if err != nil || f < 0 || f != f || f > 1e12 {
		return 0
	}
	return f
}

// clipText keeps at most max bytes of s, cut on a rune boundary.
func clipText(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

func clip(s string) string { return clipText(s, 64) }

// charsetReader reads the encodings JUnit writers declare besides UTF-8: ASCII and Latin-1
// (older Java tools). Others are refused by name.
func charsetReader(charset string, r io.Reader) (io.Reader, error) {
	switch strings.ToLower(charset) {
	case "utf-8", "utf8", "us-ascii", "ascii":
		return r, nil
	case "iso-8859-1", "latin1", "latin-1":
		return &latin1Reader{r: r}, nil
	}
	return nil, fmt.Errorf("encoding %q is not supported (want UTF-8 or ISO-8859-1)", clip(charset))
}

// latin1Reader turns ISO-8859-1 bytes into UTF-8.
type latin1Reader struct {
	r   io.Reader
	buf []byte
}

func (l *latin1Reader) Read(p []byte) (int, error) {
	if len(l.buf) == 0 {
		in := make([]byte, max(len(p)/2, 1))
		n, err := l.r.Read(in)
		for _, b := range in[:n] {
			l.buf = utf8.AppendRune(l.buf, rune(b))
		}
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, l.buf)
	l.buf = l.buf[n:]
	return n, nil
}

// limitReader ends the stream with an error past left bytes (left < 0: no limit).
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		// One byte more tells a stream of exactly the limit from a longer one.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.over = true
			return 0, errors.New("report too large")
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
