package webtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

// chromiumPath is Debian's chromium package (`.ci/run` installs it); chromedp drives it.
// Nothing downloads a browser: the tests fail, never skip, when it is missing.
const chromiumPath = "/usr/bin/chromium"

// waitLong bounds every wait on a condition in the browser: generous, for a loaded 2-core
// machine running the race detector; a condition met earlier ends the wait at once.
const waitLong = 45 * time.Second

// newChrome starts a headless Chromium for the test and returns a tab's context.
func newChrome(t testing.TB) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless Chromium is required at %s for the browser tests (Debian: apt-get install -y chromium; .ci/run installs it): %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first run starts the browser; it must not have a timeout (it would stop it).
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`1`)); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// run runs browser actions within waitLong, failing the test with what was being done.
func run(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, waitLong)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
		t.Fatalf("%s: %v\n(at %s)\n%s", what, err, loc, body)
	}
}

// value runs one action that returns a value, within waitLong.
func value[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, waitLong)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitJS waits until a script expression is true in the page. It asks again every 100 ms,
// through navigations (an evaluation during one fails, and is simply tried again).
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for {
			ok, err := chromedp.Evaluate[bool]("!!("+expr+")")(ctx, t)
			if err == nil && ok {
				return chromedp.Void{}, nil
			}
			select {
			case <-ctx.Done():
				return chromedp.Void{}, fmt.Errorf("waiting for %s: %w (last answer %v, %v)", expr, ctx.Err(), ok, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// clickNav clicks something that submits a form or follows a link, and waits until the
// next page has loaded.
func clickNav(sel chromedp.CSS) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(js(`window.__leaving = true`), chromedp.Click(sel),
		waitJS(`window.__leaving === undefined && document.readyState === "complete"`))
}

// js runs a script for its effect.
func js(expr string) chromedp.Action[chromedp.Void] { return chromedp.Evaluate[chromedp.Void](expr) }

// css names the first element a CSS selector matches.
func css(format string, args ...any) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(format, args...)) }

func signInBrowser(t testing.TB, ctx context.Context, base string) {
	t.Helper()
	run(t, ctx, "sign in",
		chromedp.Navigate(base+"/sign_in"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", jobapitest.AdminToken),
		chromedp.Submit("#token"),
		chromedp.WaitVisible(css(`nav[aria-label="Main"]`)),
	)
}

// screenshot saves the viewport as name.png in the folder JOBAPI_SCREENSHOTS names
// (the committed ones are in docs/screenshots); without it, in the test's temp dir.
func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("JOBAPI_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png := value(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// markPage sets a flag in the page's window: it survives live updates and is gone after a
// reload, so a test can tell that it saw a change without reloading.
func markPage(t testing.TB, ctx context.Context) {
	run(t, ctx, "mark the page", js(`window.__noReload = true`))
}

func requireNoReload(t testing.TB, ctx context.Context) {
	t.Helper()
	if !value(t, ctx, "check the page was not reloaded", chromedp.Evaluate[bool](`window.__noReload === true`)) {
		t.Fatal("the page was reloaded; the change should have arrived live")
	}
}

const dagYAML = `
stages: [build, test, deploy]
compile:
  stage: build
  script: [make]
lint:
  stage: build
  script: [make lint]
unit:
  stage: test
  needs: [compile]
  script: [make test]
integration:
  stage: test
  needs: [compile, lint]
  script: [make it]
ship:
  stage: deploy
  needs: [unit, integration]
  script: [make ship]
`

// colourLog is a gitlab-runner log: a folded section, colours, a section left open.
const colourLog = "\x1b[0KRunning with gitlab-runner 19.4.0\x1b[0;m\n" +
	"section_start:1700000000:prepare_script[collapsed=true]\r\x1b[0K\x1b[0K\x1b[36;1mPreparing environment\x1b[0;m\n" +
	"Running on runner-vm-1...\n" +
	"section_end:1700000003:prepare_script\r\x1b[0K\n" +
	"section_start:1700000003:step_script\r\x1b[0K\x1b[0K\x1b[36;1mExecuting \"step_script\" stage of the job script\x1b[0;m\n" +
	"\x1b[32;1m$ make\x1b[0;m\n" +
	"\x1b[31merror: flaky network, retrying\x1b[0m\n"

// TestBrowserJobLifecycleLive: a DAG pipeline created through the API; its first job, on its
// page, goes pending → waiting for ack (with the countdown) → running → success, with a
// coloured log whose folded section and live tail arrive, all without a reload.
func TestBrowserJobLifecycleLive(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.AckTTL = 10 * time.Minute }})
	inst.EnableTwoPhase(t, 1)
	runner := inst.NewRunner(t)
	runner.Info.Features.TwoPhaseJobCommit = true
	p := inst.CreateYAML(t, 1, "", dagYAML)
	compile := jobapitest.JobID(t, p, "compile")
	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)

	// The pipeline: stages as columns, needs as edges.
	run(t, ctx, "pipeline page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/1/pipelines/%d", inst.URL, p.ID)),
		chromedp.WaitVisible(css(`li.card[data-name="ship"]`)),
		waitJS(`document.querySelectorAll("svg.edges path").length === 5`),
	)
	screenshot(t, ctx, "pipeline-dag")

	run(t, ctx, "job page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/1/jobs/%d", inst.URL, compile)),
		chromedp.WaitVisible(css(`#job-status[data-status="pending"]`)),
		waitJS(`document.body.dataset.liveConnected === "1"`),
	)
	waitHealthy(t, inst)
	markPage(t, ctx)

	job := runner.TakeNamed(t, "compile")
	run(t, ctx, "waiting for the ack, with a countdown",
		chromedp.WaitVisible(css(`#job-status[data-status="waiting_for_runner_ack"]`)),
		chromedp.WaitVisible(css(`#ack-countdown`)),
		waitJS(`/^\d+\.\d s$/.test(document.getElementById("ack-countdown").textContent)`),
	)
	countdown := value(t, ctx, "read the countdown", chromedp.Text(css(`#ack-countdown`)))
	run(t, ctx, "the countdown counts down",
		waitJS(`document.getElementById("ack-countdown").textContent !== `+fmt.Sprintf("%q", countdown)))
	screenshot(t, ctx, "job-waiting-for-ack")

	jobapitest.WantUpdate(t, "ack", runner.Put(t, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}), http.StatusOK, "running")
	run(t, ctx, "running after the ack",
		chromedp.WaitVisible(css(`#job-status[data-status="running"]`)),
		waitJS(`document.querySelector('#timeline li[data-step="acknowledged"]').classList.contains("done")`),
		waitJS(`document.querySelector('#timeline li[data-step="acknowledged"] .detail').textContent.includes("ack latency")`),
	)

	runner.Patch(t, job, 0, colourLog)
	run(t, ctx, "the log arrives with colours and a folded section",
		chromedp.WaitVisible(css(`#log .term-fg31`)),
		waitJS(`document.querySelector('#log .term-fg31').textContent === "error: flaky network, retrying"`),
		waitJS(`getComputedStyle(document.querySelector('#log .term-fg31')).color === "rgb(255, 123, 114)"`),
		waitJS(`document.querySelector('#log details.sec[data-name="prepare_script"]').open === false`),
		waitJS(`document.querySelector('#log details.sec[data-name="prepare_script"] .dur').textContent === "3s"`),
		waitJS(`document.querySelector('#log details.sec[data-name="step_script"]').open === true`),
	)
	// The folded section opens from the keyboard: focus its header, press Enter.
	run(t, ctx, "unfold a section with the keyboard",
		chromedp.Focus(css(`#log details.sec[data-name="prepare_script"] > summary`)),
		chromedp.KeyEvent("\r"),
		waitJS(`document.querySelector('#log details.sec[data-name="prepare_script"]').open === true`),
	)
	more := "\x1b[33mtests: 120 passed\x1b[0m\nsection_end:1700000065:step_script\r\x1b[0K\n\x1b[32;1mJob succeeded\x1b[0;m\n"
	runner.Patch(t, job, len(colourLog), more)
	run(t, ctx, "the tail continues the open section and closes it with its duration",
		chromedp.WaitVisible(css(`#log .term-fg33`)),
		waitJS(`document.querySelector('#log details.sec[data-name="step_script"] .term-fg33') !== null`),
		waitJS(`document.querySelector('#log details.sec[data-name="step_script"] > summary .dur').textContent === "1m 02s"`),
		waitJS(`document.getElementById("L10") !== null && document.getElementById("L10").textContent.includes("Job succeeded")`),
	)
	screenshot(t, ctx, "job-log-live")
	runner.Finish(t, job, runnerclient.StateSuccess, "")
	run(t, ctx, "success",
		chromedp.WaitVisible(css(`#job-status[data-status="success"]`)),
		waitJS(`!document.getElementById("log").hasAttribute("data-live-log")`),
	)
	requireNoReload(t, ctx)

	// A link to a line opens the section that holds it.
	run(t, ctx, "link to a line",
		chromedp.Navigate(fmt.Sprintf("%s/projects/1/jobs/%d#L3", inst.URL, compile)),
		chromedp.WaitVisible(css(`#L3`)),
		waitJS(`document.querySelector('#log details.sec[data-name="prepare_script"]').open === true`),
	)
}

// TestBrowserAckTimeoutBecomesRetry: a runner takes a job and never acknowledges; the
// page counts down to the deadline and then shows the timeout, the retry and a link to
// the next attempt, live; the two-phase page lists the timeout.
func TestBrowserAckTimeoutBecomesRetry(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Sweeper: true, Configure: func(c *server.Config) { c.AckTTL = 4 * time.Second }})
	inst.EnableTwoPhase(t, 2)
	runner := inst.NewRunner(t)
	runner.Info.Features.TwoPhaseJobCommit = true
	p := inst.CreatePipeline(t, 2, []string{"test"}, jobapitest.Job{"name": "vm-job", "stage": "test", "script": []string{"true"}})
	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)
	job := runner.TakeNamed(t, "vm-job")
	run(t, ctx, "the job waits with a countdown",
		chromedp.Navigate(fmt.Sprintf("%s/projects/2/jobs/%d", inst.URL, job.ID)),
		chromedp.WaitVisible(css(`#ack-countdown`)),
		waitJS(`document.body.dataset.liveConnected === "1"`),
	)
	markPage(t, ctx)
	run(t, ctx, "the ack timeout and the retry appear",
		chromedp.WaitVisible(css(`#job-status[data-status="failed"]`)),
		chromedp.WaitVisible(css(`#failure-reason`)),
		waitJS(`document.getElementById("failure-reason").textContent === "runner_provisioning_timeout"`),
		waitJS(`document.querySelector('#timeline li[data-step="ack_timeout"]') !== null`),
		waitJS(`document.querySelectorAll("#retry-chain li").length === 2`),
	)
	requireNoReload(t, ctx)
	screenshot(t, ctx, "job-ack-timeout-retried")
	run(t, ctx, "follow the chain to attempt 2",
		clickNav(css(`#retry-chain li:nth-child(2) a`)),
		chromedp.WaitVisible(css(`#retry-chain li[aria-current] strong`)),
		waitJS(`document.querySelector("#retry-chain li:first-child .why code").textContent === "runner_provisioning_timeout"`),
	)
	run(t, ctx, "the two-phase page lists the timeout and the retry",
		chromedp.Navigate(inst.URL+"/two_phase"),
		waitJS(`Array.from(document.querySelectorAll("#recent td")).some(td => td.textContent === "ack_timeout")`),
		waitJS(`Array.from(document.querySelectorAll("#recent td")).some(td => td.textContent === "retried")`),
	)
	// The next runner takes attempt 2 and the page shows it waiting, live.
	markPage(t, ctx)
	runner.TakeNamed(t, "vm-job")
	run(t, ctx, "a waiting job appears with its countdown",
		waitJS(`document.querySelectorAll("#waiting .countdown-cell").length === 1`))
	requireNoReload(t, ctx)
	screenshot(t, ctx, "two-phase")
	_ = p
}

// TestBrowserActionsAndFlag: cancel from the pipeline page, the flag toggled from the
// two-phase page, runners paused, and a form with a wrong CSRF token refused.
func TestBrowserActionsAndFlag(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	runner.Info.Version, runner.Info.Executor = "19.4.0", "docker-autoscaler"
	runner.NoJob(t) // registers the manager
	p := inst.CreateYAML(t, 3, "", dagYAML)
	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)

	run(t, ctx, "pipelines list",
		chromedp.Navigate(inst.URL+"/pipelines"),
		chromedp.WaitVisible(css(`tr[data-pipeline="%d"]`, p.ID)),
		waitJS(`document.body.dataset.liveConnected === "1"`),
	)
	waitHealthy(t, inst)
	markPage(t, ctx)
	p2 := inst.CreatePipeline(t, 4, []string{"test"}, jobapitest.Job{"name": "one", "stage": "test", "script": []string{"true"}})
	run(t, ctx, "a new pipeline appears in the list without a reload",
		chromedp.WaitVisible(css(`tr[data-pipeline="%d"]`, p2.ID)))
	requireNoReload(t, ctx)
	screenshot(t, ctx, "pipelines")

	// Keyboard: the skip link is the first stop, then the navigation.
	run(t, ctx, "keyboard navigation",
		chromedp.Navigate(inst.URL+"/pipelines"),
		chromedp.WaitVisible(css(`nav[aria-label="Main"]`)),
		chromedp.KeyEvent("\t"),
	)
	focused := value(t, ctx, "focused element", chromedp.Evaluate[string](`document.activeElement.textContent`))
	if focused != "Skip to content" {
		t.Errorf("first Tab focuses %q, want the skip link", focused)
	}

	unit := jobapitest.JobID(t, p, "unit")
	run(t, ctx, "cancel a job from the pipeline page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/3/pipelines/%d", inst.URL, p.ID)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"]`, unit)),
		clickNav(css(`li.card[data-job="%d"] button[aria-label="Cancel unit"]`, unit)),
		chromedp.WaitVisible(css(`p.notice`)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="canceled"]`, unit)),
	)
	if j := inst.Job(t, 3, unit); j.Status != "canceled" {
		t.Fatalf("unit is %s after the cancel, want canceled", j.Status)
	}
	run(t, ctx, "retry it from its job page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/3/jobs/%d", inst.URL, unit)),
		clickNav(css(`#retry-job`)),
		chromedp.WaitVisible(css(`p.notice`)),
		waitJS(`document.querySelectorAll("#retry-chain li").length === 2`),
	)

	// A manual job is played from the pipeline page.
	manual := inst.CreateYAML(t, 3, "", "release:\n  stage: deploy\n  when: manual\n  script: [make release]\n")
	release := jobapitest.JobID(t, manual, "release")
	run(t, ctx, "play a manual job",
		chromedp.Navigate(fmt.Sprintf("%s/projects/3/pipelines/%d", inst.URL, manual.ID)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="manual"]`, release)),
		clickNav(css(`li.card[data-job="%d"] button[aria-label="Play release"]`, release)),
		chromedp.WaitVisible(css(`p.notice`)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="pending"]`, release)),
	)
	if j := inst.Job(t, 3, release); j.Status != "pending" {
		t.Fatalf("release is %s after play, want pending", j.Status)
	}

	run(t, ctx, "turn the flag on for every project",
		chromedp.Navigate(inst.URL+"/two_phase"),
		chromedp.WaitVisible(css(`#flag-toggle`)),
		clickNav(css(`#flag-toggle`)),
		waitJS(`document.getElementById("flag-global").textContent === "on"`),
	)
	var features []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/features", nil, &features)
	if len(features) != 1 || features[0].State != "on" {
		t.Fatalf("features after the toggle: %+v", features)
	}
	run(t, ctx, "open the gate for one project and set a percentage",
		chromedp.SendKeys(css(`#flag-project`), "42"),
		clickNav(css(`#flag-project ~ button[value="project_on"]`)),
		waitJS(`document.getElementById("flag-actors").textContent.includes("project:42")`),
		chromedp.SetValue(css(`#flag-pct`), "25"),
		clickNav(css(`#flag-pct ~ button`)),
		waitJS(`document.getElementById("flag-percentage").textContent === "25%"`),
	)

	// A form whose CSRF token was tampered with is refused, and nothing changes.
	run(t, ctx, "a wrong CSRF token is refused",
		js(`document.querySelector('#flag-toggle').form.querySelector('[name=csrf_token]').value = "forged"`),
		clickNav(css(`#flag-toggle`)),
		chromedp.WaitVisible(css(`p.alert`)),
	)
	body := value(t, ctx, "the refusal", chromedp.Text(css(`main`)))
	if !strings.Contains(body, "CSRF token is missing or wrong") {
		t.Fatalf("tampered form answered: %s", body)
	}
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/features", nil, &features)
	if features[0].State != "on" {
		t.Fatalf("a refused form changed the flag: %+v", features)
	}

	run(t, ctx, "pause a runner",
		chromedp.Navigate(inst.URL+"/runners"),
		chromedp.WaitVisible(css(`section.runner`)),
		clickNav(css(`section.runner form[action$="/pause"] button`)),
		chromedp.WaitVisible(css(`section.runner .badge.s-paused`)),
	)
	run(t, ctx, "reset its token, shown once",
		js(`window.confirm = () => true`), // the operator clicks OK
		clickNav(css(`section.runner form[action$="/reset_token"] button`)),
		chromedp.WaitVisible(css(`#new-token`)),
		waitJS(`document.getElementById("new-token").value.startsWith("glrt-")`),
	)
	screenshot(t, ctx, "runners")
	run(t, ctx, "the token is gone on the next visit",
		chromedp.Navigate(inst.URL+"/runners"),
		chromedp.WaitVisible(css(`section.runner`)),
		waitJS(`document.getElementById("new-token") === null`),
	)
	run(t, ctx, "sign out", clickNav(css(`form.signout button`)), chromedp.WaitVisible(css(`#token`)))
	screenshot(t, ctx, "sign-in")
}
