package junit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func parseFile(t *testing.T, name string) []Case {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases, err := Parse(f, DefaultLimits)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cases
}

func statuses(cases []Case) string {
	var s []string
	for _, c := range cases {
		s = append(s, c.Name+"="+c.Status)
	}
	return strings.Join(s, " ")
}

// Reports as real writers produce them: pytest's --junitxml, go-junit-report, Maven
// surefire (a bare <testsuite> declared ISO-8859-1) and jest-junit.
func TestParseWriters(t *testing.T) {
	t.Parallel()
	py := parseFile(t, "pytest.xml")
	if got := statuses(py); got != "test_add=success test_div=failed test_skip=skipped test_open=error" {
		t.Errorf("pytest statuses: %s", got)
	}
	div := py[1]
	if div.Classname != "tests.test_math" || div.File != "tests/test_math.py" || div.Time != 0.002 {
		t.Errorf("pytest test_div: %+v", div)
	}
	if !strings.HasPrefix(div.SystemOutput, "ZeroDivisionError: division by zero\n\ndef test_div():\n>       assert 1 / 0") ||
		!strings.Contains(div.StackTrace, "tests/test_math.py:8: ZeroDivisionError") {
		t.Errorf("pytest failure output %q, trace %q", div.SystemOutput, div.StackTrace)
	}
	if py[2].SystemOutput != "not on linux\n\ntests/test_math.py:11: not on linux" || py[2].StackTrace != "" {
		t.Errorf("pytest skip: output %q, trace %q", py[2].SystemOutput, py[2].StackTrace)
	}
	if !strings.HasSuffix(py[3].SystemOutput, "\n\nopening data.csv") || !strings.Contains(py[3].StackTrace, "FileNotFoundError") {
		t.Errorf("pytest error: output %q, trace %q", py[3].SystemOutput, py[3].StackTrace)
	}
	if py[0].SystemOutput != "" || py[0].StackTrace != "" {
		t.Errorf("a passing case has output %q, trace %q", py[0].SystemOutput, py[0].StackTrace)
	}

	gjr := parseFile(t, "go-junit-report.xml")
	if got := statuses(gjr); got != "TestOK=success TestBad=failed TestSlow=success" {
		t.Errorf("go-junit-report statuses: %s", got)
	}
	if gjr[1].StackTrace != "a_test.go:12: got 2, want 3" || gjr[1].SystemOutput != "Failed\n\na_test.go:12: got 2, want 3" {
		t.Errorf("go-junit-report failure: %+v", gjr[1])
	}
	if gjr[2].Time != 1234.5 {
		t.Errorf("time 1,234.5 read as %v", gjr[2].Time)
	}

	sf := parseFile(t, "surefire.xml")
	if got := statuses(sf); got != "testApp=success testCafé=failed" {
		t.Errorf("surefire statuses: %s", got)
	}
	if !strings.Contains(sf[1].StackTrace, "at com.example.AppTest.testCafe(AppTest.java:20)") ||
		!strings.HasPrefix(sf[1].SystemOutput, "expected:<1> but was:<2>\n\njava.lang.AssertionError") ||
		!strings.HasSuffix(sf[1].SystemOutput, "\n\ncaf") {
		t.Errorf("surefire failure: output %q, trace %q", sf[1].SystemOutput, sf[1].StackTrace)
	}

	if l := parseFile(t, "latin1.xml"); len(l) != 1 || l[0].Name != "café" {
		t.Errorf("ISO-8859-1 report: %+v", l)
	}
	if got := statuses(parseFile(t, "jest.xml")); got != "sum adds 1 + 2 to equal 3=success sum todo=skipped" {
		t.Errorf("jest statuses: %s", got)
	}
}

// The runner concatenates every matched file into one stream: several documents, each
// with its XML declaration, some <testsuites>, some bare <testsuite>.
func TestParseConcatenatedDocuments(t *testing.T) {
	t.Parallel()
	var all bytes.Buffer
	want := 0
	for _, name := range []string{"pytest.xml", "go-junit-report.xml", "jest.xml", "surefire.xml"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		want += len(parseFile(t, name))
	}
	cases, err := Parse(&all, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != want {
		t.Errorf("%d cases from the concatenated files, want %d", len(cases), want)
	}
	// Suites nested in suites (surefire aggregates, Jest projects) count their cases.
	nested := `<testsuites><testsuite name="outer"><testsuite name="inner"><testcase name="deep"/></testsuite><testcase name="shallow"><skipped/></testcase></testsuite></testsuites>`
	cases, err = Parse(strings.NewReader(nested), DefaultLimits)
	if err != nil || statuses(cases) != "deep=success shallow=skipped" {
		t.Errorf("nested suites: %s, %v", statuses(cases), err)
	}
}

// What is not a JUnit report is refused with a message naming the fault, and no cases.
func TestParseMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, xml, want string }{
		{"unclosed", `<testsuite><testcase name="a">`, "JUnit XML parsing failed: XML syntax error on line 1: unexpected EOF"},
		{"mismatched", "<testsuite>\n<testcase name=\"a\"></testsuite>", "JUnit XML parsing failed: XML syntax error on line 2: element <testcase> closed by </testsuite>"},
		{"other root", `<?xml version="1.0"?><html><body/></html>`, "root element is <html>"},
		{"empty", "", "has no <testsuites> or <testsuite>"},
		{"text", "just some text", "text outside the root element"},
		{"json", `{"tests": []}`, "text outside the root element"},
		{"bad attribute", `<testsuite><testcase name=a/></testsuite>`, "unquoted or missing attribute value"},
		{"encoding", `<?xml version="1.0" encoding="EBCDIC"?><testsuite/>`, `encoding "EBCDIC" is not supported`},
	} {
		cases, err := Parse(strings.NewReader(tc.xml), DefaultLimits)
		if err == nil || !strings.Contains(err.Error(), tc.want) || cases != nil {
			t.Errorf("%s: %d cases, error %v; want one containing %q", tc.name, len(cases), err, tc.want)
		}
	}
}

// The limits hold: the bytes read, the cases kept, the text of each.
func TestParseLimits(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("<testsuite>")
	for i := range 1000 {
		fmt.Fprintf(&b, `<testcase name="t%d"/>`, i)
	}
	b.WriteString("</testsuite>")
	doc := b.String()

	if _, err := Parse(strings.NewReader(doc), Limits{MaxBytes: int64(len(doc))}); err != nil {
		t.Errorf("a report of exactly the limit: %v", err)
	}
	var tooLarge *TooLargeError
	if _, err := Parse(strings.NewReader(doc), Limits{MaxBytes: int64(len(doc)) - 1}); !errors.As(err, &tooLarge) {
		t.Errorf("a report one byte past the limit: %v", err)
	}
	var tooMany *TooManyCasesError
	if _, err := Parse(strings.NewReader(doc), Limits{MaxCases: 999}); !errors.As(err, &tooMany) || err.Error() != "the report has more than 999 test cases" {
		t.Errorf("1000 cases with a limit of 999: %v", err)
	}
	if cases, err := Parse(strings.NewReader(doc), Limits{MaxCases: 1000}); err != nil || len(cases) != 1000 {
		t.Errorf("1000 cases with a limit of 1000: %d, %v", len(cases), err)
	}
	long := `<testsuite><testcase name="x"><failure message="m">` + strings.Repeat("é", 100) + `</failure></testcase></testsuite>`
	cases, err := Parse(strings.NewReader(long), Limits{MaxText: 51})
	if err != nil || cases[0].StackTrace != strings.Repeat("é", 25)+"…" {
		t.Errorf("a trace cut to 51 bytes: %q, %v", cases[0].StackTrace, err)
	}
}

// A report that nests deep or is made of countless elements is refused as it is read, at
// the limit, with an error that says so: what a small gzip of nested tags expands to would
// otherwise cost the decoder a record per open element (gigabytes), and its time.
func TestParseDepthAndElements(t *testing.T) {
	t.Parallel()
	nested := func(prefix, open string, n int) string {
		return prefix + strings.Repeat(open, n)
	}
	for _, tc := range []struct {
		name, xml string
		lim       Limits
		want      string
	}{
		{"suites nested", nested("<testsuites>", "<testsuite>", 300), DefaultLimits, "nest more than 256 levels deep"},
		{"unknown elements nested", nested("<testsuites>", "<a>", 1_000_000), DefaultLimits, "nest more than 256 levels deep"},
		{"nested inside a case", nested("<testsuites><testsuite><testcase name=\"x\"><failure>", "<a>", 1_000_000), DefaultLimits, "nest more than 256 levels deep"},
		{"flat elements", nested("<testsuites>", "<a/>", 100_000), Limits{MaxElements: 100_000}, "more than 100000 XML elements"},
		{"flat cases", nested("<testsuite>", "<testcase/>", 10), Limits{MaxElements: 10}, "more than 10 XML elements"},
	} {
		start := time.Now()
		cases, err := Parse(strings.NewReader(tc.xml), tc.lim)
		if err == nil || !strings.Contains(err.Error(), tc.want) || cases != nil {
			t.Errorf("%s: %d cases, %v; want an error containing %q", tc.name, len(cases), err, tc.want)
		}
		t.Logf("%s: refused in %v: %v", tc.name, time.Since(start).Round(time.Millisecond), err)
	}
	var deep *TooDeepError
	if _, err := Parse(strings.NewReader(nested("<testsuite>\n", "<a>", 300)), DefaultLimits); !errors.As(err, &deep) || deep.Line != 2 {
		t.Errorf("too deep: %v, want a *TooDeepError at line 2", err)
	}
	var many *TooManyElementsError
	if _, err := Parse(strings.NewReader(nested("<testsuite>", "<a/>", 20)), Limits{MaxElements: 20}); !errors.As(err, &many) {
		t.Errorf("21 elements past a limit of 20: %v", err)
	}
	// At the limits, a report is read.
	ok := strings.Repeat("<testsuite>", 254) + `<testcase name="deep"><failure message="m">trace</failure></testcase>` + strings.Repeat("</testsuite>", 254)
	if cases, err := Parse(strings.NewReader(ok), DefaultLimits); err != nil || statuses(cases) != "deep=failed" || cases[0].StackTrace != "trace" {
		t.Errorf("a case 256 levels deep: %s, %v", statuses(cases), err)
	}
}

// The case reader reads a <testcase> as encoding/xml's Unmarshal did: attributes and children
// by local name, only the text directly inside a child, every <system-out>, a repeated result
// read again into the same result.
func TestParseCaseFields(t *testing.T) {
	t.Parallel()
	doc := `<testsuite><testcase x:name="n" classname="C" file="f.go" time="0.5" xmlns:x="urn:x">` +
		`<failure message="first" type="T">text <b>bold</b>after</failure>` +
		`<error message="e"/>` +
		`<system-out>one</system-out><other><system-out>nested, not the case's</system-out></other><system-out>two</system-out>` +
		`<system-err>err</system-err>` +
		`</testcase><testcase name="s"><skipped/><failure message="second">again</failure><failure>third</failure></testcase></testsuite>`
	cases, err := Parse(strings.NewReader(doc), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	c := cases[0]
	want := Case{Status: StatusFailed, Name: "n", Classname: "C", File: "f.go", Time: 0.5,
		SystemOutput: "first\n\ntext after\n\none\n\ntwo", StackTrace: "text after"}
	if c != want {
		t.Errorf("case:\n got %+v\nwant %+v", c, want)
	}
	// Two failures: the message of the first stays, the text is the last one's.
	if c := cases[1]; c.Status != StatusFailed || c.StackTrace != "third" || c.SystemOutput != "second\n\nthird" {
		t.Errorf("repeated failure: %+v", c)
	}
}
