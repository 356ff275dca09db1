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

// deployYAML deploys to production (a start), a review app that a manual job stops, and
// staging, whose external_url a test turns into a javascript: URL in the table (a row
// written before URLs were checked).
const deployYAML = `
stages: [deploy, cleanup]
deploy:
  stage: deploy
  script: [./deploy]
  environment:
    name: production
    url: https://prod.example.com/app?x=<b>
review:
  stage: deploy
  script: [./review]
  environment: {name: review/$CI_COMMIT_REF_SLUG, url: "https://$CI_COMMIT_REF_SLUG.review.example", on_stop: stop_review}
staging:
  stage: deploy
  script: [./stage]
  environment: {name: staging, url: "https://staging.example"}
stop_review:
  stage: cleanup
  script: [./stop]
  when: manual
  environment: {name: review/$CI_COMMIT_REF_SLUG, action: stop}
`

// TestBrowserProjectsAndEnvironments: projects have pages: the list (the repository
// without its credentials), a project with its pipelines, linked from the pipeline and
// job pages; its environments with their state, their URL linked only when it is http(s),
// and the last deployment's job and pipeline; a deploy job's page names its environment
// and action.
func TestBrowserProjectsAndEnvironments(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj struct{ ID int64 }
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects",
		map[string]any{"name": "Shop <front>", "repo_url": "https://deployer:s3cret-pass@git.example/shop.git"}, &proj)
	p := inst.CreateYAML(t, proj.ID, "", deployYAML)
	runner := inst.NewRunner(t)
	jobs := runner.TakeAll(t, 3)
	for _, name := range []string{"deploy", "review", "staging"} {
		runner.Patch(t, jobs[name], 0, "deployed\n")
		runner.Finish(t, jobs[name], runnerclient.StateSuccess, "")
	}
	if _, err := inst.Pool.Exec(t.Context(), `UPDATE environments SET external_url = 'javascript:alert(1)' WHERE project_id = $1 AND name = 'staging'`, proj.ID); err != nil {
		t.Fatal(err)
	}
	stopID := jobapitest.JobID(t, p, "stop_review")

	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)
	run(t, ctx, "the projects list",
		chromedp.Navigate(inst.URL+"/projects"),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-project="%d"] a').textContent === "Shop <front>"`, proj.ID)),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-project="%d"] code').textContent === "https://*****:*****@git.example/shop.git"`, proj.ID)),
		waitJS(`!document.documentElement.outerHTML.includes("s3cret")`),
	)
	screenshot(t, ctx, "projects")
	run(t, ctx, "the project page from the list",
		clickNav(css(`tr[data-project="%d"] a`, proj.ID)),
		waitJS(`document.getElementById("project-name").textContent.startsWith("Shop <front>")`),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-pipeline="%d"]') !== null`, p.ID)),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-pipeline="%d"]').textContent.includes("main")`, p.ID)),
		waitJS(`!document.documentElement.outerHTML.includes("s3cret")`),
	)
	screenshot(t, ctx, "project")
	run(t, ctx, "the pipeline page links to its project",
		clickNav(css(`tr[data-pipeline="%d"] a`, p.ID)),
		waitJS(fmt.Sprintf(`document.getElementById("pipeline-project").getAttribute("href") === "/projects/%d"`, proj.ID)),
	)

	run(t, ctx, "environments",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/environments", inst.URL, proj.ID)),
		chromedp.WaitVisible(css(`tr[data-environment="production"]`)),
		waitJS(`new URL(document.querySelector('tr[data-environment="production"] a.ext-url').href).host === "prod.example.com"`),
		waitJS(`new URL(document.querySelector('tr[data-environment="production"] a.ext-url').href).searchParams.get("x") === "<b>"`),
		waitJS(`document.querySelector('tr[data-environment="production"] .badge').textContent === "available"`),
		waitJS(fmt.Sprintf(`document.querySelector('tr[data-environment="production"] .last-deployment a').getAttribute("href") === "/projects/%d/jobs/%d"`, proj.ID, jobs["deploy"].ID)),
		waitJS(fmt.Sprintf(`document.querySelectorAll('tr[data-environment="production"] .last-deployment a')[1].getAttribute("href") === "/projects/%d/pipelines/%d"`, proj.ID, p.ID)),
		waitJS(`document.querySelector('tr[data-environment="review/main"] a.ext-url').href === "https://main.review.example/"`),
		// Not a link: a javascript: URL stays text.
		waitJS(`document.querySelector('tr[data-environment="staging"] a.ext-url') === null`),
		waitJS(`document.querySelector('tr[data-environment="staging"]').textContent.includes("javascript:alert(1)")`),
		waitJS(`!Array.from(document.querySelectorAll("a")).some(a => a.getAttribute("href").startsWith("javascript"))`),
	)
	screenshot(t, ctx, "environments")

	run(t, ctx, "a deploy job names its environment",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/jobs/%d", inst.URL, proj.ID, jobs["deploy"].ID)),
		waitJS(`document.querySelector("#job-environment a").textContent === "production"`),
		waitJS(`document.getElementById("job-environment-action").textContent === "start"`),
		waitJS(fmt.Sprintf(`document.getElementById("job-project").getAttribute("href") === "/projects/%d"`, proj.ID)),
	)
	run(t, ctx, "a stop job names its environment and the stop",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/jobs/%d", inst.URL, proj.ID, stopID)),
		waitJS(`document.querySelector("#job-environment a").textContent === "review/main"`),
		waitJS(`document.getElementById("job-environment-action").textContent === "stop"`),
	)

	// An implicit project (pipelines name it, no row) has a page too; an id nothing names
	// is a 404.
	implicit := inst.CreatePipeline(t, 9, []string{"test"}, jobapitest.Job{"name": "t", "stage": "test", "script": []string{"true"}})
	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	page := b.get("/projects/9", http.StatusOK)
	if !strings.Contains(page, fmt.Sprintf(`data-pipeline="%d"`, implicit.ID)) || !strings.Contains(page, "No project was created with this id") {
		t.Fatalf("implicit project page:\n%s", page)
	}
	b.get("/projects/12345", http.StatusNotFound)
	b.get("/projects/abc", http.StatusNotFound)
	if page := b.get(fmt.Sprintf("/projects/%d", proj.ID), http.StatusOK); !strings.Contains(page, "Shop &lt;front&gt;") || strings.Contains(page, "Shop <front>") {
		t.Fatal("the project's name is not escaped")
	}
}
