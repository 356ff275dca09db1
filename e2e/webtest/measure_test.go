package webtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// The web UI's measurements (a large pipeline's graph, a long log). Each runs in CI at a size
// that keeps the suite short and checks what the page must hold (every edge drawn, the log's
// end numbered); the times are logged, not asserted: a wall-clock bound under -race on a
// shared machine fails on load, not on a regression. The environment variables set the sizes
// docs/web-ui.md reports (without -race):
//
//	JOBAPI_WEB_LOG_MB=100 JOBAPI_WEB_TABS=100 go test -count=1 -run 'TestMeasure' -v ./e2e/webtest

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// loadTime navigates and returns the browser's navigation timing: until the document is
// parsed (the page is readable and usable) and until the load event.
func loadTime(t testing.TB, ctx context.Context, url, ready string) (time.Duration, time.Duration) {
	t.Helper()
	run(t, ctx, "open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(ready)))
	ms := value(t, ctx, "navigation timing", chromedp.Evaluate[[]float64](
		`(() => { const n = performance.getEntriesByType("navigation")[0]; return [n.domContentLoadedEventEnd, n.loadEventEnd]; })()`))
	return time.Duration(ms[0] * float64(time.Millisecond)), time.Duration(ms[1] * float64(time.Millisecond))
}

// TestMeasureLargePipeline: a 2,000-job DAG pipeline (5 stages of 400, each job needing two
// of the stage before) is one server-rendered page; the browser has it laid out, edges
// drawn, in well under a second.
func TestMeasureLargePipeline(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	const stages, perStage = 5, 400
	var y strings.Builder
	y.WriteString("stages: [s0, s1, s2, s3, s4]\n")
	for s := range stages {
		for j := range perStage {
			fmt.Fprintf(&y, "j%d_%d:\n  stage: s%d\n  script: [\"make %d\"]\n", s, j, s, j)
			if s > 0 {
				fmt.Fprintf(&y, "  needs: [j%d_%d, j%d_%d]\n", s-1, j, s-1, (j+1)%perStage)
			}
		}
	}
	p := inst.CreateYAML(t, 1, "", y.String())
	if len(p.Jobs) != stages*perStage {
		t.Fatalf("pipeline has %d jobs", len(p.Jobs))
	}
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	path := fmt.Sprintf("/projects/1/pipelines/%d", p.ID)
	b.get(path, http.StatusOK) // warm the connection and the template
	start := time.Now()
	page := b.get(path, http.StatusOK)
	server := time.Since(start)

	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)
	loadTime(t, ctx, inst.URL+path, `li.card[data-name="j4_399"]`) // warm
	parsed, loaded := loadTime(t, ctx, inst.URL+path, `li.card[data-name="j4_399"]`)
	edges := value(t, ctx, "edges", chromedp.Evaluate[int](`document.querySelectorAll("svg.edges path").length`))
	t.Logf("2,000-job pipeline: HTML %d KB served in %v; in Chromium parsed at %v, loaded (laid out, %d edges) at %v",
		len(page)>>10, server.Round(time.Millisecond), parsed.Round(time.Millisecond), edges, loaded.Round(time.Millisecond))
	if edges != (stages-1)*perStage*2 {
		t.Errorf("%d edges drawn, want %d", edges, (stages-1)*perStage*2)
	}
}

// TestMeasureLargeLog: a log of JOBAPI_WEB_LOG_MB (8 in CI) opens at its end, numbered from
// the line count Postgres makes, and pages back; nothing reads the whole log but the raw
// download, which streams it.
func TestMeasureLargeLog(t *testing.T) {
	t.Parallel()
	mb := envInt("JOBAPI_WEB_LOG_MB", 8)
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.TraceLimit = int64(mb+1) << 20 }})
	runner := inst.NewRunner(t)
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobapitest.Job{"name": "big", "stage": "test", "script": []string{"true"}})
	job := runner.TakeNamed(t, "big")
	var chunk strings.Builder
	for i := 0; chunk.Len() < 1<<20-200; i++ {
		fmt.Fprintf(&chunk, "\x1b[32m%06d\x1b[0m a line of build output that is about this long, as compilers print\n", i)
	}
	lines := strings.Count(chunk.String(), "\n")
	offset := 0
	for range mb {
		if res := runner.Patch(t, job, offset, chunk.String()); res.Code != http.StatusAccepted {
			t.Fatalf("trace patch at %d: %d", offset, res.Code)
		}
		offset += chunk.Len()
	}
	runner.Finish(t, job, runnerclient.StateSuccess, "")
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	path := fmt.Sprintf("/projects/1/jobs/%d", job.ID)
	start := time.Now()
	page := b.get(path, http.StatusOK)
	server := time.Since(start)
	last := fmt.Sprintf(`id="L%d"`, lines*mb)
	if !strings.Contains(page, last) {
		t.Fatalf("the log's end is not numbered %s", last)
	}
	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)
	parsed, loaded := loadTime(t, ctx, inst.URL+path, fmt.Sprintf(`#L%d`, lines*mb))
	earlier, _ := loadTime(t, ctx, inst.URL+path+"?log_from=0", `#L1`)
	t.Logf("%d MB log (%d lines): tail page served in %v (HTML %d KB, first view: counting lines in Postgres), in Chromium parsed at %v, loaded at %v; first page loaded at %v",
		mb, lines*mb, server.Round(time.Millisecond), len(page)>>10, parsed.Round(time.Millisecond), loaded.Round(time.Millisecond), earlier.Round(time.Millisecond))
	_ = p
}

// cpuTime is this process's CPU time: the replica under test and the test's runner.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMeasureTabs: JOBAPI_WEB_TABS (10 in CI) browser tabs on the live pages of a running
// job (its log tailing) and of its pipeline, while the runner appends to the log every
// 200 ms. It compares jobapi's CPU with the same activity and no tab open, and the CPU of
// the tabs idling on a pipeline that does not change.
func TestMeasureTabs(t *testing.T) {
	tabs := envInt("JOBAPI_WEB_TABS", 10)
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	p := inst.CreatePipeline(t, 1, []string{"test"},
		jobapitest.Job{"name": "busy", "stage": "test", "script": []string{"true"}},
		jobapitest.Job{"name": "other", "stage": "test", "script": []string{"true"}})
	job := runner.TakeNamed(t, "busy")
	offset := 0
	activity := func(d time.Duration) time.Duration {
		start, end := cpuTime(), time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			line := fmt.Sprintf("\x1b[33mstep %d\x1b[0m output\n", i)
			if res := runner.Patch(t, job, offset, line); res.Code != http.StatusAccepted {
				t.Fatalf("patch: %d", res.Code)
			}
			offset += len(line)
			time.Sleep(200 * time.Millisecond)
		}
		return cpuTime() - start
	}
	const window = 15 * time.Second
	alone := activity(window)

	ctx := newChrome(t)
	var pages []context.Context
	for i := range tabs {
		// Each tab in a browser context of its own, as many operators' browsers would be:
		// one browser keeps at most six connections to a host, so its seventh live tab
		// would wait for one (pages give their stream back while hidden).
		tab, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
		t.Cleanup(cancel)
		if _, err := chromedp.Run(tab, js(`1`)); err != nil { // opens the tab: no timeout here
			t.Fatalf("open tab %d: %v", i, err)
		}
		signInBrowser(t, tab, inst.URL) // a browser context has cookies of its own
		url := fmt.Sprintf("%s/projects/1/jobs/%d", inst.URL, job.ID)
		if i%2 == 1 {
			url = fmt.Sprintf("%s/projects/1/pipelines/%d", inst.URL, p.ID)
		}
		run(t, tab, "open tab", chromedp.Navigate(url), waitJS(`document.body.dataset.liveConnected === "1"`))
		pages = append(pages, tab)
	}
	if n := inst.Hub.Streams(); n != tabs {
		t.Fatalf("%d event streams for %d tabs", n, tabs)
	}
	withTabs := activity(window)
	// Every job tab followed the log to its end.
	for i := 0; i < tabs; i += 2 {
		run(t, pages[i], "tab followed the log", waitJS(fmt.Sprintf(`document.getElementById("log").dataset.nextOffset === "%d"`, offset)))
	}
	idleStart := cpuTime()
	time.Sleep(window)
	idle := cpuTime() - idleStart
	pct := func(d time.Duration) string {
		return strconv.FormatFloat(100*d.Seconds()/window.Seconds(), 'f', 1, 64) + "%"
	}
	t.Logf("%d tabs (half on the tailing job, half on its pipeline), log appended every 200 ms for %v: jobapi+runner CPU %v (%s of a core) with the tabs, %v (%s) without: the tabs cost %s of a core; idle tabs: %v (%s)",
		tabs, window, withTabs.Round(time.Millisecond), pct(withTabs), alone.Round(time.Millisecond), pct(alone),
		pct(withTabs-alone), idle.Round(time.Millisecond), pct(idle))
	// Without -race a tab costs about 0.3 % of a core here; the bound catches a polling
	// storm (a tab reloading whole pages), with room for the race detector's overhead.
	if per := (withTabs - alone) / time.Duration(tabs); per > window/20 {
		t.Errorf("each live tab costs %v of CPU per %v, over 5%% of a core", per, window)
	}
}
