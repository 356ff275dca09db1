package webtest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// runFromWebYAML has a job only a web pipeline runs and one only a variable releases.
const runFromWebYAML = `
stages: [build, deploy]
build:
  stage: build
  script: [make]
web_only:
  stage: build
  script: [echo from the page]
  rules:
    - if: $CI_PIPELINE_SOURCE == "web"
deploy:
  stage: deploy
  script: [./deploy]
  rules:
    - if: $DEPLOY == "yes"
`

// gitRepo makes a bare repository whose main branch holds files, and returns its path and
// the commit.
func gitRepo(t *testing.T, files map[string]string) (bare, sha string) {
	t.Helper()
	repo := jobapitest.NewGitRepo(t)
	sha = repo.Commit(files)
	return repo.Bare, sha
}

// TestBrowserRunPipelineFromProject: a project page's "Run a pipeline" form takes a ref
// and variables and creates the pipeline as the API does with a ref (the repository's
// .gitlab-ci.yml at the ref's head), with CI_PIPELINE_SOURCE web; a refused ref shows the
// form again with the reason; the form needs the session's CSRF token.
func TestBrowserRunPipelineFromProject(t *testing.T) {
	t.Parallel()
	bare, sha := gitRepo(t, map[string]string{".gitlab-ci.yml": runFromWebYAML})
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj struct{ ID int64 }
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + bare}, &proj)

	ctx := newChrome(t)
	signInBrowser(t, ctx, inst.URL)
	run(t, ctx, "the form from the project page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d", inst.URL, proj.ID)),
		clickNav(css(`#new-pipeline`)),
		chromedp.WaitVisible(css(`#np-ref`)),
		waitJS(`document.getElementById("np-ref").value === "main"`),
		chromedp.SendKeys(css(`input[name="key_0"]`), "DEPLOY"),
		chromedp.SendKeys(css(`input[name="value_0"]`), "yes"),
	)
	screenshot(t, ctx, "new-pipeline")
	run(t, ctx, "run it",
		clickNav(css(`#run-pipeline`)),
		chromedp.WaitVisible(css(`li.card[data-name="deploy"]`)),
		waitJS(`document.querySelector('li.card[data-name="web_only"]') !== null`),
		waitJS(`document.querySelector("p.notice").textContent === "Pipeline created."`),
	)
	loc := value(t, ctx, "location", chromedp.Location())
	var id int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(loc, inst.URL), fmt.Sprintf("/projects/%d/pipelines/%%d", proj.ID), &id); err != nil {
		t.Fatalf("after the form: %s: %v", loc, err)
	}
	var p api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", proj.ID, id), nil, &p)
	if p.Source != "web" || p.Ref != "main" || p.Sha != sha {
		t.Fatalf("pipeline source %q ref %q sha %q; want web, main, %s", p.Source, p.Ref, p.Sha, sha)
	}
	// The variable's value reached the rules: deploy is there only with DEPLOY == "yes".
	if len(p.Variables) != 1 || p.Variables[0].Key != "DEPLOY" {
		t.Fatalf("pipeline variables %+v, want DEPLOY", p.Variables)
	}

	run(t, ctx, "an unknown ref is refused on the form",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/pipelines/new", inst.URL, proj.ID)),
		chromedp.WaitVisible(css(`#np-ref`)),
		js(`document.getElementById("np-ref").value = "no-such-branch"`),
		clickNav(css(`#run-pipeline`)),
		chromedp.WaitVisible(css(`#new-pipeline-error`)),
		waitJS(`document.getElementById("new-pipeline-error").textContent.includes("no-such-branch")`),
		waitJS(`document.getElementById("np-ref").value === "no-such-branch"`),
	)

	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	path := fmt.Sprintf("/projects/%d/pipelines", proj.ID)
	// A value without a key: the form again, with what was typed, escaped.
	_, body := b.post(path, url.Values{"ref": {"main"}, "value_1": {`<script>alert(1)</script>`}}, http.StatusBadRequest)
	if !strings.Contains(body, "Variable row 2 has a value but no key.") || strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("value without a key:\n%s", body)
	}
	if _, body := b.post(path, url.Values{"ref": {" "}}, http.StatusBadRequest); !strings.Contains(body, "Give the branch or tag") {
		t.Fatalf("no ref:\n%s", body)
	}
	// Without the session's CSRF token: refused, nothing created.
	b.post(path, url.Values{"ref": {"main"}, "csrf_token": {"forged"}}, http.StatusForbidden)
	if n := strings.Count(b.get(fmt.Sprintf("/projects/%d", proj.ID), http.StatusOK), "<tr data-pipeline="); n != 1 {
		t.Fatalf("%d pipelines on the project page after a forged form, want 1", n)
	}
	// An implicit project has no repository: the form says so.
	if _, body := b.post("/projects/77/pipelines", url.Values{"ref": {"main"}}, http.StatusBadRequest); !strings.Contains(body, "has no repository") {
		t.Fatalf("implicit project:\n%s", body)
	}
}
