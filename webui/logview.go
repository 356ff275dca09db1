package webui

import (
	"bytes"
	"fmt"
	"html/template"
	"regexp"
	"strconv"
	"strings"
	"time"

	terminal "github.com/buildkite/terminal-to-html/v3"
)

// A job log is rendered in windows of bytes, never whole: a window starts at a line start,
// and its lines are numbered from the count of line breaks before it (TraceLines), so a
// 100 MB log costs what its visible part costs. Each window is rendered by Buildkite's
// terminal-to-html (colours, cursor movement within a line, links) and gitlab-runner's
// section markers become <details> elements, folded when the runner asked for it, with
// their durations.

// sectionMarker is what gitlab-runner writes at a section's start and end (its
// helpers/trace section markers): the time in Unix seconds, a name, options on a start.
var sectionMarker = regexp.MustCompile(`section_(start|end):(\d+):([A-Za-z0-9_.-]+)(?:\[([^\]\r\n]*)\])?\r\x1b\[0K`)

// logLine is one line of a window.
type logLine struct {
	n      int64 // 1-based line number
	offset int64 // byte offset of its first byte in the log
	raw    []byte
	html   string
	// starts and ends are the section markers on the line, in order; ends come first
	// when both are present (gitlab-runner ends a section before starting the next).
	starts []sectionStart
	ends   []sectionEnd
	// partial: the last line of a log still being written (no line break yet).
	partial bool
	// blank: only markers were on the line; it is counted, not shown.
	blank bool
}

type sectionStart struct {
	name         string
	at           int64
	collapsed    bool
	hideDuration bool
}

type sectionEnd struct {
	name string
	at   int64
}

// logWindow is the rendered part of a log.
type logWindow struct {
	HTML template.HTML
	// From and To are the byte range the window covers; Lines is how many complete lines
	// it holds (a partial last line is shown but not counted, and To stops before it).
	From, To  int64
	FirstLine int64
	Lines     int64
}

// splitLines cuts data into lines with their markers parsed. A trailing piece without a
// line break is returned as a partial line when keepPartial is set, else left out.
func splitLines(data []byte, firstLine, firstOffset int64, keepPartial bool) []logLine {
	var out []logLine
	n, off := firstLine, firstOffset
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		partial := i < 0
		if partial && !keepPartial {
			break
		}
		raw := data
		if !partial {
			raw = data[:i]
		}
		l := logLine{n: n, offset: off, partial: partial}
		l.raw, l.starts, l.ends = stripMarkers(raw)
		l.blank = len(l.raw) == 0 && len(l.ends) > 0 && len(l.starts) == 0
		out = append(out, l)
		if partial {
			break
		}
		data = data[i+1:]
		n++
		off += int64(i + 1)
	}
	return out
}

// stripMarkers removes section markers from a line and returns them.
func stripMarkers(raw []byte) ([]byte, []sectionStart, []sectionEnd) {
	if !bytes.Contains(raw, []byte("section_")) {
		return raw, nil, nil
	}
	var starts []sectionStart
	var ends []sectionEnd
	for _, m := range sectionMarker.FindAllSubmatch(raw, -1) {
		at, _ := strconv.ParseInt(string(m[2]), 10, 64)
		name := string(m[3])
		if string(m[1]) == "end" {
			ends = append(ends, sectionEnd{name: name, at: at})
			continue
		}
		s := sectionStart{name: name, at: at}
		for _, opt := range strings.Split(string(m[4]), ",") {
			switch strings.TrimSpace(opt) {
			case "collapsed=true":
				s.collapsed = true
			case "hide_duration=true":
				s.hideDuration = true
			}
		}
		starts = append(starts, s)
	}
	return sectionMarker.ReplaceAll(raw, nil), starts, ends
}

// renderTerminal renders the lines' text through one terminal screen, so that colours set
// on one line carry to the next as in a terminal. The screen is one row high: cursor
// movement cannot reach earlier lines, so each log line is exactly one rendered line. If
// a sequence still broke that (an absolute cursor position inserts a row), each line is
// rendered on its own instead.
func renderTerminal(lines []logLine) {
	if len(lines) == 0 {
		return
	}
	var buf bytes.Buffer
	for i, l := range lines {
		if i > 0 {
			buf.WriteByte('\n')
		}
		buf.Write(l.raw)
	}
	screen, err := terminal.NewScreen(terminal.WithSize(160, 1))
	if err == nil {
		screen.Timestamps = false
		_, _ = screen.Write(buf.Bytes())
		out := strings.Split(screen.AsHTMLWithTimestamps(false), "\n")
		if len(out) == len(lines) {
			for i := range lines {
				lines[i].html = out[i]
			}
			return
		}
	}
	for i := range lines {
		lines[i].html = strings.TrimSuffix(terminal.Render(lines[i].raw), "\n")
	}
}

// renderWindow renders a window of a log: data starts at byte from, which is a line start,
// and its first line is number firstLine. complete says the log will not grow (the job
// finished), so a last line without a line break is a line like the others.
func renderWindow(data []byte, from, firstLine int64, complete bool) logWindow {
	lines := splitLines(data, firstLine, from, true)
	renderTerminal(lines)
	w := logWindow{From: from, To: from + int64(len(data)), FirstLine: firstLine}
	for i := range lines {
		if lines[i].partial && complete {
			lines[i].partial = false
		}
		if lines[i].partial {
			w.To = lines[i].offset
			continue
		}
		w.Lines++
	}
	w.HTML = template.HTML(linesHTML(lines))
	return w
}

// sectionEnds finds, for each line that starts a section, when that section ends within
// the lines (absent: later, or never).
func sectionEnds(lines []logLine) map[int]int64 {
	ends := map[int]int64{}
	type open struct {
		name string
		line int
	}
	var stack []open
	for i, l := range lines {
		for _, e := range l.ends {
			for j := len(stack) - 1; j >= 0; j-- {
				if stack[j].name == e.name {
					for _, o := range stack[j:] {
						ends[o.line] = e.at
					}
					stack = stack[:j]
					break
				}
			}
		}
		for _, st := range l.starts {
			stack = append(stack, open{st.name, i})
		}
	}
	return ends
}

// linesHTML nests the lines in sections. A section still open at the end of the window is
// marked data-open (the next window continues inside it); an end whose start is before
// the window becomes a hidden marker that the page's script uses to close the section it
// has open.
func linesHTML(lines []logLine) string {
	var b strings.Builder
	ends := sectionEnds(lines)
	var stack []string
	closeTo := func(name string) bool {
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i] != name {
				continue
			}
			for j := len(stack) - 1; j >= i; j-- {
				b.WriteString(`</div></details>`)
			}
			stack = stack[:i]
			return true
		}
		return false
	}
	for i, l := range lines {
		for _, e := range l.ends {
			if !closeTo(e.name) {
				fmt.Fprintf(&b, `<span class="sec-end" data-name="%s" data-end="%d" hidden></span>`, template.HTMLEscapeString(e.name), e.at)
			}
		}
		if len(l.starts) > 0 {
			// Nested starts on one line would have no line of their own: the outer ones
			// open with their name as the header.
			for k, s := range l.starts {
				openAttr, hide, dur := " open", "", ""
				if s.collapsed {
					openAttr = ""
				}
				if s.hideDuration {
					hide = " data-hide-duration"
				}
				state := " data-open"
				if end, ok := ends[i]; ok {
					state = fmt.Sprintf(" data-end=%q", strconv.FormatInt(end, 10))
					if !s.hideDuration {
						dur = durationText(time.Duration(end-s.at) * time.Second)
					}
				}
				fmt.Fprintf(&b, `<details class="sec" data-name="%s" data-start="%d"%s%s%s>`,
					template.HTMLEscapeString(s.name), s.at, state, openAttr, hide)
				if k < len(l.starts)-1 {
					fmt.Fprintf(&b, `<summary class="ln"><span class="lnum"></span><span class="lt">%s</span><span class="dur">%s</span></summary><div class="sec-body">`,
						template.HTMLEscapeString(s.name), dur)
				} else {
					b.WriteString(`<summary class="ln"`)
					lineAttrs(&b, l)
					b.WriteString(`>`)
					lineBody(&b, l)
					fmt.Fprintf(&b, `<span class="dur">%s</span></summary><div class="sec-body">`, dur)
				}
				stack = append(stack, s.name)
			}
			continue
		}
		if l.blank {
			continue
		}
		b.WriteString(`<div class="ln`)
		if l.partial {
			b.WriteString(` partial`)
		}
		b.WriteString(`"`)
		lineAttrs(&b, l)
		b.WriteString(`>`)
		lineBody(&b, l)
		b.WriteString(`</div>`)
	}
	for range stack {
		b.WriteString(`</div></details>`)
	}
	return b.String()
}

func lineAttrs(b *strings.Builder, l logLine) {
	if !l.partial {
		fmt.Fprintf(b, ` id="L%d"`, l.n)
	}
	fmt.Fprintf(b, ` data-offset="%d"`, l.offset)
}

func lineBody(b *strings.Builder, l logLine) {
	if l.partial {
		b.WriteString(`<span class="lnum" aria-hidden="true"></span>`)
	} else {
		fmt.Fprintf(b, `<a class="lnum" href="#L%d" aria-label="line %d">%d</a>`, l.n, l.n, l.n)
	}
	b.WriteString(`<span class="lt">`)
	b.WriteString(l.html)
	b.WriteString(`</span>`)
}

// optionalDuration is durationText of d, or "—" when there is none (not started).
func optionalDuration(d *time.Duration) string {
	if d == nil {
		return "—"
	}
	return durationText(*d)
}

// durationText formats a section's or job's duration the way CI pages do: 1m 05s.
func durationText(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh %02dm %02ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm %02ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}
