package webtest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// warningsYAML: build feeds package across the test stage (the edge that used to run
// under "unit 1/2"), unit reports coverage in two parallel jobs, flaky may fail.
const warningsYAML = `
stages: [build, test, package]
build:
  stage: build
  script: [make]
unit:
  stage: test
  parallel: 2
  needs: [build]
  coverage: '/Coverage: \d+\.\d+%/'
  script: [make test]
flaky:
  stage: test
  needs: [build]
  allow_failure: true
  script: [make flaky]
package:
  stage: package
  needs: [build]
  script: [make package]
`

// edgesUnderCards lists the needs edges that pass over a card they do not connect: each
// path is sampled every 2 px (getPointAtLength) and every point checked against every
// other card's box, both in the graph's coordinates (the SVG and the cards share its
// origin).
const edgesUnderCards = `(() => {
  const graph = document.querySelector(".graph");
  const cards = Array.from(graph.querySelectorAll("li.card"));
  const bad = [];
  if (cards.some(c => c.offsetParent !== graph)) return ["a card is not placed in the graph"];
  for (const p of graph.querySelectorAll("svg.edges path")) {
    const len = p.getTotalLength();
    for (const c of cards) {
      if (c.dataset.job === p.dataset.from || c.dataset.job === p.dataset.to) continue;
      const x0 = c.offsetLeft, y0 = c.offsetTop, x1 = x0 + c.offsetWidth, y1 = y0 + c.offsetHeight;
      for (let s = 0; s <= len; s += 2) {
        const pt = p.getPointAtLength(s);
        if (pt.x > x0 && pt.x < x1 && pt.y > y0 && pt.y < y1) {
          bad.push(p.dataset.from + "→" + p.dataset.to + " under " + c.dataset.name + " at " + Math.round(pt.x) + "," + Math.round(pt.y));
          break;
        }
      }
    }
  }
  return bad;
})()`

// TestBrowserCoverageWarningsAndEdges: jobs report coverage, an allow_failure job fails;
// the pipeline passed with warnings (orange, with words and an icon), the failed job is a
// warning on the graph, the list and its page, coverage shows on the job, the graph and
// the pipeline (the average of its jobs'), and no needs edge runs under a card it does not
// connect.
func TestBrowserCoverageWarningsAndEdges(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	p := inst.CreateYAML(t, 4, "", warningsYAML)
	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)

	run(t, ctx, "the DAG before anything ran",
		chromedp.Navigate(fmt.Sprintf("%s/projects/4/pipelines/%d", inst.URL, p.ID)),
		chromedp.WaitVisible(css(`li.card[data-name="package"]`)),
		waitJS(`document.querySelectorAll("svg.edges path").length === 4`),
	)
	buildID, packageID := jobapitest.JobID(t, p, "build"), jobapitest.JobID(t, p, "package")
	run(t, ctx, "build → package is drawn",
		waitJS(fmt.Sprintf(`document.querySelector('svg.edges path[data-from="%d"][data-to="%d"]') !== null`, buildID, packageID)))
	if bad := value(t, ctx, "edge geometry", chromedp.Evaluate[[]string](edgesUnderCards)); len(bad) > 0 {
		t.Fatalf("needs edges pass under cards they do not connect: %v", bad)
	}

	finish := func(name, log, state string) {
		t.Helper()
		job := runner.TakeNamed(t, name)
		runner.Patch(t, job, 0, log)
		runner.Finish(t, job, state, map[string]string{runnerclient.StateFailed: "script_failure"}[state])
	}
	finish("build", "built\n", runnerclient.StateSuccess)
	jobs := runner.TakeAll(t, 4)
	for name, log := range map[string]string{"unit 1/2": "ok\nCoverage: 80.00%\n", "unit 2/2": "ok\nCoverage: 90.50%\n", "package": "packed\n"} {
		runner.Patch(t, jobs[name], 0, log)
		runner.Finish(t, jobs[name], runnerclient.StateSuccess, "")
	}
	runner.Patch(t, jobs["flaky"], 0, "flaked\n")
	runner.Finish(t, jobs["flaky"], runnerclient.StateFailed, "script_failure")

	run(t, ctx, "the pipeline passed with warnings",
		chromedp.Navigate(fmt.Sprintf("%s/projects/4/pipelines/%d", inst.URL, p.ID)),
		waitJS(`document.getElementById("pipeline-status").dataset.status === "warning"`),
		waitJS(`document.getElementById("pipeline-status").textContent.trim() === "⚠ passed with warnings"`),
		waitJS(`document.querySelector("#pipeline-status .icon").getAttribute("aria-hidden") === "true"`),
		// Orange (#bc4c00), not the failure's red.
		waitJS(`getComputedStyle(document.getElementById("pipeline-status")).backgroundColor === "rgb(188, 76, 0)"`),
		waitJS(`document.getElementById("pipeline-coverage").textContent === "85.25%"`),
		waitJS(`document.querySelector('li.card[data-name="flaky"]').hasAttribute("data-warning")`),
		waitJS(`document.querySelector('li.card[data-name="flaky"] .st').textContent.trim() === "⚠ failed (allowed to fail)"`),
		waitJS(`getComputedStyle(document.querySelector('li.card[data-name="flaky"]')).borderLeftColor === "rgb(188, 76, 0)"`),
		waitJS(`document.querySelector('li.card[data-name="unit 1/2"] .cov').textContent === "80.00%"`),
		waitJS(`document.querySelector('li.card[data-name="unit 2/2"] .cov').textContent === "90.50%"`),
		waitJS(`!document.querySelector('li.card[data-name="build"]').hasAttribute("data-warning")`),
	)
	if bad := value(t, ctx, "edge geometry after the run", chromedp.Evaluate[[]string](edgesUnderCards)); len(bad) > 0 {
		t.Fatalf("needs edges pass under cards they do not connect: %v", bad)
	}
	screenshot(t, ctx, "pipeline-warnings")

	run(t, ctx, "the list says passed with warnings, with the coverage",
		chromedp.Navigate(inst.URL+"/pipelines?project=4"),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-pipeline="%d"] .badge').textContent.trim() === "⚠ passed with warnings"`, p.ID)),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-pipeline="%d"] td.cov').textContent === "85.25%%"`, p.ID)),
	)
	run(t, ctx, "the job page of the allowed failure",
		chromedp.Navigate(fmt.Sprintf("%s/projects/4/jobs/%d", inst.URL, jobs["flaky"].ID)),
		waitJS(`document.getElementById("job-status").dataset.status === "failed"`),
		waitJS(`document.getElementById("job-status").hasAttribute("data-warning")`),
		waitJS(`document.getElementById("job-status").textContent.trim() === "⚠ failed (allowed to fail)"`),
	)
	run(t, ctx, "the job page shows its coverage",
		chromedp.Navigate(fmt.Sprintf("%s/projects/4/jobs/%d", inst.URL, jobs["unit 1/2"].ID)),
		waitJS(`document.getElementById("job-coverage").textContent === "80.00%"`),
	)

	// A plain failure stays red and "failed", and fails its pipeline.
	strict := inst.CreatePipeline(t, 4, []string{"test"}, jobapitest.Job{"name": "strict", "stage": "test", "script": []string{"false"}})
	finish("strict", "no\n", runnerclient.StateFailed)
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	page := b.get(fmt.Sprintf("/projects/4/pipelines/%d", strict.ID), http.StatusOK)
	if !strings.Contains(page, `class="badge s-failed" id="pipeline-status"`) || strings.Contains(page, "with warnings") || strings.Contains(page, "allowed to fail") {
		t.Fatalf("a plain failure shows as a warning:\n%s", page)
	}
}
