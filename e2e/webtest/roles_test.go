package webtest

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// signInWith signs the browser in with a token and waits for the first page.
func signInWith(base, token string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(base+"/sign_in"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", token),
		chromedp.Submit("#token"),
		chromedp.WaitVisible(css(`nav[aria-label="Main"]`)),
	)
}

// memberToken creates a user with an api token and gives it a role on the project.
func memberToken(t *testing.T, inst *jobapitest.Instance, project int64, name string, level int) string {
	t.Helper()
	var u api.UserDetail
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/users", map[string]any{"username": name, "name": name, "email": name + "@example.com"}, &u)
	var tok api.PersonalAccessToken
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", u.ID),
		map[string]any{"name": "web", "scopes": []string{"api"}}, &tok)
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/members", project),
		map[string]any{"user_id": u.ID, "access_level": level}, nil)
	return tok.Token
}

// TestBrowserActionsFollowTheRole: in Chromium, a reporter sees a project's pipelines and
// jobs without their actions (retry, play, cancel, run pipeline, the administrators' pages);
// a developer sees and uses retry and play on an unprotected branch, and not on the
// protected main; and the server refuses the hidden actions anyway, to the same sessions.
func TestBrowserActionsFollowTheRole(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "roles"}, &proj)
	reporter := memberToken(t, inst, proj.ID, "rita", 20)
	developer := memberToken(t, inst, proj.ID, "devon", 30)

	var feature, onMain api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", proj.ID), map[string]any{
		"ref": "feature", "stages": []string{"test"}, "jobs": []map[string]any{
			{"name": "unit", "stage": "test", "script": []string{"make test"}},
			{"name": "deploy", "stage": "test", "script": []string{"./deploy"}, "when": "manual"},
		}}, &feature)
	job := runner.TakeNamed(t, "unit")
	runner.Finish(t, job, runnerclient.StateFailed, "script_failure")
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", proj.ID), map[string]any{
		"ref": "main", "stages": []string{"test"}, "jobs": []map[string]any{
			{"name": "release", "stage": "test", "script": []string{"./release"}, "when": "manual"},
		}}, &onMain)
	unit, deploy, release := job.ID, jobapitest.JobID(t, feature, "deploy"), jobapitest.JobID(t, onMain, "release")
	pipelinePage := func(p api.Pipeline) string {
		return fmt.Sprintf("%s/projects/%d/pipelines/%d", inst.URL, proj.ID, p.ID)
	}

	// The reporter: pages, no actions.
	ctx := newChrome(t)
	run(t, ctx, "the reporter signs in", signInWith(inst.URL, reporter))
	run(t, ctx, "the reporter's pipeline page",
		chromedp.Navigate(pipelinePage(feature)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="failed"]`, unit)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="manual"]`, deploy)))
	for what, sel := range map[string]string{
		"a retry button":            `li.card button[aria-label="Retry unit"]`,
		"a play button":             `li.card button[aria-label="Play deploy"]`,
		"a cancel button":           `li.card button[aria-label^="Cancel"]`,
		"the administrators' links": `nav a[href="/runners"], nav a[href="/two_phase"], nav a[href="/pipelines"]`,
	} {
		if n := value(t, ctx, what, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))); n != 0 {
			t.Errorf("the reporter's pipeline page shows %s (%d)", what, n)
		}
	}
	run(t, ctx, "the reporter's job page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/jobs/%d", inst.URL, proj.ID, unit)),
		chromedp.WaitVisible(css(`#job-status`)))
	if n := value(t, ctx, "retry on the job page", chromedp.Evaluate[int](`document.querySelectorAll("#retry-job").length`)); n != 0 {
		t.Errorf("the reporter's job page shows Retry")
	}
	run(t, ctx, "the reporter's project page",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d", inst.URL, proj.ID)),
		chromedp.WaitVisible(css(`#project-environments`)))
	if n := value(t, ctx, "run a pipeline link", chromedp.Evaluate[int](`document.querySelectorAll("#new-pipeline").length`)); n != 0 {
		t.Errorf("the reporter's project page links to Run a pipeline")
	}
	// The server refuses what the page hid, to the reporter's own session.
	rb := newBrowser(t, inst.URL)
	rb.signIn(reporter)
	rb.post(fmt.Sprintf("/projects/%d/jobs/%d/retry", proj.ID, unit), nil, http.StatusForbidden)
	rb.post(fmt.Sprintf("/projects/%d/jobs/%d/play", proj.ID, deploy), nil, http.StatusForbidden)
	if resp, _ := rb.do("GET", fmt.Sprintf("/projects/%d/pipelines/new", proj.ID), nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the reporter's run-a-pipeline form: %d, want 403", resp.StatusCode)
	}
	if resp, _ := rb.do("GET", "/runners", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the reporter's runners page: %d, want 403", resp.StatusCode)
	}
	if resp, _ := rb.do("GET", fmt.Sprintf("/projects/%d", proj.ID+1), nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another project's page: %d, want 404", resp.StatusCode)
	}
	if j := inst.Job(t, proj.ID, unit); j.RetriedBy != nil {
		t.Fatalf("the reporter's refused retry retried the job: %+v", j)
	}

	// The developer: retry and play on the feature branch, nothing on protected main.
	run(t, ctx, "the reporter signs out, the developer signs in",
		clickNav(css(`form.signout button`)),
		signInWith(inst.URL, developer))
	run(t, ctx, "the developer plays deploy and retries unit from the pipeline page",
		chromedp.Navigate(pipelinePage(feature)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"] button[aria-label="Retry unit"]`, unit)),
		clickNav(css(`li.card[data-job="%d"] button[aria-label="Play deploy"]`, deploy)),
		chromedp.WaitVisible(css(`p.notice`)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="pending"]`, deploy)),
		clickNav(css(`li.card[data-job="%d"] button[aria-label="Retry unit"]`, unit)),
		chromedp.WaitVisible(css(`p.notice`)))
	if j := inst.Job(t, proj.ID, unit); j.RetriedBy == nil {
		t.Errorf("unit was not retried by the developer's click: %+v", j)
	}
	run(t, ctx, "the developer's page of the pipeline on main",
		chromedp.Navigate(pipelinePage(onMain)),
		chromedp.WaitVisible(css(`li.card[data-job="%d"][data-status="manual"]`, release)))
	if n := value(t, ctx, "play on main", chromedp.Evaluate[int](`document.querySelectorAll('li.card button[aria-label="Play release"]').length`)); n != 0 {
		t.Errorf("the developer sees Play on the protected main")
	}
	run(t, ctx, "the developer's project page", chromedp.Navigate(fmt.Sprintf("%s/projects/%d", inst.URL, proj.ID)),
		chromedp.WaitVisible(css(`#new-pipeline`)))
	db := newBrowser(t, inst.URL)
	db.signIn(developer)
	db.post(fmt.Sprintf("/projects/%d/jobs/%d/play", proj.ID, release), nil, http.StatusForbidden)
	if j := inst.Job(t, proj.ID, release); j.Status != "manual" {
		t.Fatalf("release on main is %s after the developer's refused play, want manual", j.Status)
	}
}
