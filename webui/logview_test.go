package webui

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runnerLog is what gitlab-runner v17 writes for a shell job: markers, colours, a folded
// section, a nested one, and a last line still being written.
const runnerLog = "\x1b[0KRunning with gitlab-runner 17.9.3 (abc)\x1b[0;m\n" +
	"section_start:1700000000:prepare_executor\r\x1b[0K\x1b[0K\x1b[36;1mPreparing the \"shell\" executor\x1b[0;m\n" +
	"Using Shell executor...\n" +
	"section_end:1700000002:prepare_executor\r\x1b[0K\n" +
	"section_start:1700000002:get_sources[collapsed=true]\r\x1b[0K\x1b[36;1mGetting source\x1b[0;m\n" +
	"Fetching changes...\n" +
	"section_end:1700000065:get_sources\r\x1b[0K\n" +
	"section_start:1700000065:step_script\r\x1b[0KExecuting \"step_script\"\n" +
	"\x1b[31mred <b>not bold</b>\n" +
	"still red\x1b[0m\n" +
	"progress 10%\rprogress 100%\n" +
	"section_end:1700000070:step_script\r\x1b[0K\n" +
	"\x1b[32;1mJob succeeded\x1b[0;m\n" +
	"partial line"

func TestRenderWindowSectionsColoursAndNumbers(t *testing.T) {
	w := renderWindow([]byte(runnerLog), 0, 1, false)
	html := string(w.HTML)
	for _, want := range []string{
		// Lines are numbered from 1 and linkable; the marker text is gone.
		`id="L1"`, `<a class="lnum" href="#L1" aria-label="line 1">1</a>`,
		// Sections: open by default, folded when the runner asks, with their durations.
		`<details class="sec" data-name="prepare_executor" data-start="1700000000" data-end="1700000002" open>`,
		`<details class="sec" data-name="get_sources" data-start="1700000002" data-end="1700000065">`,
		`<span class="dur">2s</span>`, `<span class="dur">1m 03s</span>`, `<span class="dur">5s</span>`,
		// Colours from terminal-to-html, carried across a line break; HTML escaped.
		`<span class="term-fg31">red &lt;b&gt;not bold&lt;&#47;b&gt;</span>`,
		`<span class="term-fg31">still red</span>`,
		`<span class="term-fg32 term-fg1">Job succeeded</span>`,
		// A carriage return overwrites the line, as a terminal does.
		`progress 100%`,
		// The line still being written is shown but has no number yet.
		`<div class="ln partial" data-offset=`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("rendered log lacks %q:\n%s", want, html)
		}
	}
	for _, unwanted := range []string{"section_start", "section_end", "progress 10%", `id="L15"`} {
		if strings.Contains(html, unwanted) {
			t.Errorf("rendered log contains %q", unwanted)
		}
	}
	if w.Lines != 13 || w.To != int64(strings.LastIndex(runnerLog, "\n")+1) {
		t.Errorf("window: %d lines to %d; want 13 lines to the last line break", w.Lines, w.To)
	}
	// The section end lines (4, 7, 12) are counted but not shown.
	if strings.Contains(html, `id="L4"`) || !strings.Contains(html, `id="L5"`) {
		t.Errorf("marker-only lines: want L4 hidden and L5 shown")
	}
	// Once the job finished, the last line is a line like the others.
	if done := renderWindow([]byte(runnerLog), 0, 1, true); done.Lines != 14 || done.To != int64(len(runnerLog)) {
		t.Errorf("complete window: %d lines to %d", done.Lines, done.To)
	}
}

func TestRenderWindowContinuesAndClosesEarlierSections(t *testing.T) {
	// A window that starts inside a section opened before it, as the live tail does.
	data := "inside\nsection_end:1700000010:step_script\r\x1b[0K\nafter\n"
	w := renderWindow([]byte(data), 5000, 42, false)
	html := string(w.HTML)
	for _, want := range []string{`id="L42" data-offset="5000"`, `<span class="sec-end" data-name="step_script" data-end="1700000010" hidden></span>`, `id="L44"`} {
		if !strings.Contains(html, want) {
			t.Errorf("window lacks %q:\n%s", want, html)
		}
	}
	// And one that ends inside a section still open.
	w = renderWindow([]byte("section_start:1700000000:build\r\x1b[0Kbuilding\nstep 1\n"), 0, 1, false)
	if !strings.Contains(string(w.HTML), `data-name="build" data-start="1700000000" data-open open>`) {
		t.Errorf("open section not marked: %s", w.HTML)
	}
}

func TestRenderWindowFallsBackPerLine(t *testing.T) {
	// An absolute cursor position makes terminal-to-html insert a row; numbering must
	// still follow the log's own lines.
	data := "one\x1b[5;1Htwo\nthree\n"
	w := renderWindow([]byte(data), 0, 1, true)
	if got := len(regexp.MustCompile(`id="L\d+"`).FindAllString(string(w.HTML), -1)); got != 2 || w.Lines != 2 {
		t.Errorf("got %d numbered lines, %d counted; want 2:\n%s", got, w.Lines, w.HTML)
	}
}

func BenchmarkRenderWindow(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < logWindowSize; i++ {
		fmt.Fprintf(&sb, "\x1b[32mline %d\x1b[0m of a long build log with some text in it\n", i)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	start := time.Now()
	for b.Loop() {
		renderWindow(data, 0, 1, true)
	}
	_ = start
}
