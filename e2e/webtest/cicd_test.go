package webtest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// scheduledYAML is a repository's file with one job, whatever the source.
const scheduledYAML = `
nightly:
  script: [make nightly]
`

// count is how many elements a selector matches on the page.
func count(t *testing.T, ctx context.Context, what, sel string) int {
	t.Helper()
	return value(t, ctx, what, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
}

// TestBrowserTriggersSchedulesAndVariablesFollowTheRole: in Chromium, a maintainer opens a
// project's trigger tokens, schedules and variables from its page; creates a trigger token
// (shown once, then only its last four characters, with its owner and last use), a schedule
// (a bad cron and a bad time zone shown on the form), plays, deactivates, edits and deletes
// it, adds a masked protected variable whose value no page shows; a developer sees neither
// the triggers link, nor the actions on the schedule of protected main, nor the protected
// variable; the developer's forged POSTs are refused and change nothing; every change is in
// the audit log under the maintainer's name.
func TestBrowserTriggersSchedulesAndVariablesFollowTheRole(t *testing.T) {
	t.Parallel()
	bare, sha := gitRepo(t, map[string]string{".gitlab-ci.yml": scheduledYAML})
	inst := jobapitest.Start(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "repo_url": "file://" + bare}, &proj)
	maintainer := memberToken(t, inst, proj.ID, "mia", 40)
	developer := memberToken(t, inst, proj.ID, "dev", 30)
	projectPage := fmt.Sprintf("%s/projects/%d", inst.URL, proj.ID)

	ctx := newChrome(t)
	run(t, ctx, "the maintainer signs in", signInWith(inst.URL, maintainer))

	// Trigger tokens: created, shown once, then by their last four characters.
	run(t, ctx, "the maintainer creates a trigger token",
		chromedp.Navigate(projectPage),
		clickNav(css(`#project-triggers`)),
		chromedp.WaitVisible(css(`#trigger-description`)),
		chromedp.SendKeys(css(`#trigger-description`), "deploy hook"),
		clickNav(css(`#create-trigger`)),
		chromedp.WaitVisible(css(`#new-trigger-token`)))
	token := value(t, ctx, "the new token", chromedp.Evaluate[string](`document.getElementById("new-trigger-token").value`))
	if !strings.HasPrefix(token, "glptt-") {
		t.Fatalf("the page shows the token %q, want a glptt- token", token)
	}
	screenshot(t, ctx, "triggers")
	var triggers []api.Trigger
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/triggers", proj.ID), nil, &triggers)
	if len(triggers) != 1 || triggers[0].Description != "deploy hook" || triggers[0].Owner == nil || triggers[0].Owner.Username != "mia" {
		t.Fatalf("triggers after the form: %+v, want deploy hook owned by mia", triggers)
	}
	trig := triggers[0]
	// The token works; the list then shows its use, and never the whole token again.
	resp, b := jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/trigger/pipeline", proj.ID),
		url.Values{"token": {token}, "ref": {"main"}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	run(t, ctx, "the list after the token's use",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/triggers", inst.URL, proj.ID)),
		chromedp.WaitVisible(css(`#trigger-%d`, trig.ID)))
	row := value(t, ctx, "the trigger's row", chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById("trigger-%d").innerText`, trig.ID)))
	if !strings.Contains(row, "…"+token[len(token)-4:]) || !strings.Contains(row, "mia") || strings.Contains(row, "never") {
		t.Errorf("the trigger's row %q, want its last four characters, its owner mia and a last use", row)
	}
	if html := value(t, ctx, "the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`)); strings.Contains(html, token) {
		t.Errorf("the list shows the whole token after its creation")
	}

	// Schedules: a bad cron and a bad time zone are told on the form.
	schedulesPage := fmt.Sprintf("%s/projects/%d/pipeline_schedules", inst.URL, proj.ID)
	fill := func(cron, zone string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(
			js(`document.getElementById("sc-description").value = "nightly build"`),
			js(fmt.Sprintf(`document.getElementById("sc-cron").value = %q`, cron)),
			js(fmt.Sprintf(`document.getElementById("sc-timezone").value = %q`, zone)),
			js(`document.getElementById("sc-ref").value = "main"`),
			clickNav(css(`#create-schedule`)))
	}
	run(t, ctx, "a bad cron",
		chromedp.Navigate(projectPage),
		clickNav(css(`#project-schedules`)),
		chromedp.WaitVisible(css(`#sc-cron`)),
		fill("61 * * * *", "UTC"),
		chromedp.WaitVisible(css(`#schedule-error`)),
		waitJS(`document.getElementById("schedule-error").textContent.startsWith("cron ")`),
		waitJS(`document.getElementById("sc-cron").value === "61 * * * *"`))
	run(t, ctx, "a bad time zone",
		fill("0 2 * * *", "Mars/Olympus_Mons"),
		chromedp.WaitVisible(css(`#schedule-error`)),
		waitJS(`document.getElementById("schedule-error").textContent.startsWith("cron_timezone ")`))
	run(t, ctx, "a schedule created",
		fill("0 2 * * *", "Europe/Berlin"),
		chromedp.WaitVisible(css(`p.notice`)),
		chromedp.WaitVisible(css(`tr[data-schedule] button[aria-label^="Play schedule"]`)))
	var scheds []api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules", proj.ID), nil, &scheds)
	if len(scheds) != 1 || scheds[0].Cron != "0 2 * * *" || scheds[0].CronTimezone != "Europe/Berlin" || scheds[0].Ref != "main" || !scheds[0].Active ||
		scheds[0].Owner == nil || scheds[0].Owner.Username != "mia" {
		t.Fatalf("schedules after the form: %+v", scheds)
	}
	sched := scheds[0]
	row = value(t, ctx, "the schedule's row", chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById("schedule-%d").innerText`, sched.ID)))
	for _, want := range []string{"nightly build", "0 2 * * *", "Europe/Berlin", "main", "active", "02:00 CE", "mia", "none yet"} {
		if !strings.Contains(row, want) {
			t.Errorf("the schedule's row %q lacks %q", row, want)
		}
	}
	screenshot(t, ctx, "schedules")

	// Play: the pipeline opens; the list names it as the last.
	run(t, ctx, "play",
		clickNav(css(`button[aria-label="Play schedule %d"]`, sched.ID)),
		waitJS(`document.querySelector("p.notice") && document.querySelector("p.notice").textContent.startsWith("Pipeline schedule played")`))
	var played []api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines?source=schedule", proj.ID), nil, &played)
	if len(played) != 1 || played[0].Ref != "main" || played[0].Sha != sha {
		t.Fatalf("schedule pipelines after play: %+v, want one on main at %s", played, sha)
	}
	// The browser is on that pipeline's page, which shows its job.
	if at := value(t, ctx, "the page after play", chromedp.Evaluate[string](`location.pathname`)); at != fmt.Sprintf("/projects/%d/pipelines/%d", proj.ID, played[0].ID) {
		t.Errorf("after play the browser is at %s, want pipeline %d's page", at, played[0].ID)
	}
	run(t, ctx, "the played pipeline's job", chromedp.WaitVisible(css(`li.card[data-name="nightly"]`)))
	run(t, ctx, "the last pipeline, deactivate",
		chromedp.Navigate(schedulesPage),
		waitJS(fmt.Sprintf(`document.querySelector('#schedule-%d .last-pipeline a[href$="/pipelines/%d"]') !== null`, sched.ID, played[0].ID)),
		clickNav(css(`button[aria-label="Deactivate schedule %d"]`, sched.ID)),
		chromedp.WaitVisible(css(`tr[data-schedule="%d"][data-active="false"] button[aria-label="Activate schedule %d"]`, sched.ID, sched.ID)))
	run(t, ctx, "edit: a bad cron, then a good one, active again",
		clickNav(css(`a[aria-label="Edit schedule %d"]`, sched.ID)),
		chromedp.WaitVisible(css(`#sc-cron`)),
		js(`document.getElementById("sc-cron").value = "not a cron"`),
		clickNav(css(`#save-schedule`)),
		waitJS(`document.getElementById("schedule-error").textContent.startsWith("cron ")`),
		js(`document.getElementById("sc-cron").value = "30 3 * * 1-5"`),
		js(`document.getElementById("sc-active").checked = true`),
		clickNav(css(`#save-schedule`)),
		chromedp.WaitVisible(css(`tr[data-schedule="%d"][data-active="true"]`, sched.ID)))
	var got api.PipelineSchedule
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules/%d", proj.ID, sched.ID), nil, &got)
	if got.Cron != "30 3 * * 1-5" || !got.Active || got.Description != "nightly build" {
		t.Fatalf("schedule after the edit: %+v", got)
	}

	// Variables: a masked protected one, whose value never reaches a page, and a plain one.
	const secret = "s3cret-deploy-key"
	run(t, ctx, "the maintainer adds variables",
		chromedp.Navigate(projectPage),
		clickNav(css(`#project-variables`)),
		chromedp.WaitVisible(css(`#var-key`)),
		chromedp.SendKeys(css(`#var-key`), "DEPLOY_KEY"),
		chromedp.SendKeys(css(`#var-value`), secret),
		chromedp.Click(css(`#var-protected`)),
		chromedp.Click(css(`#var-masked`)),
		clickNav(css(`#create-variable`)),
		chromedp.WaitVisible(css(`#variable-DEPLOY_KEY`)),
		chromedp.SendKeys(css(`#var-key`), "LOG_LEVEL"),
		chromedp.SendKeys(css(`#var-value`), "debug"),
		clickNav(css(`#create-variable`)),
		chromedp.WaitVisible(css(`#variable-LOG_LEVEL`)))
	screenshot(t, ctx, "variables")
	run(t, ctx, "the masked variable's edit form",
		clickNav(css(`a[aria-label="Edit variable DEPLOY_KEY"]`)),
		chromedp.WaitVisible(css(`#var-value`)))
	if html := value(t, ctx, "the edit form", chromedp.Evaluate[string](`document.documentElement.outerHTML`)); strings.Contains(html, secret) {
		t.Errorf("the masked variable's edit form shows its value")
	}
	// Saved without a new value: the value stays.
	run(t, ctx, "save the masked variable unchanged", clickNav(css(`#save-variable`)), chromedp.WaitVisible(css(`#variable-DEPLOY_KEY`)))
	if html := value(t, ctx, "the list", chromedp.Evaluate[string](`document.documentElement.outerHTML`)); strings.Contains(html, secret) {
		t.Errorf("the variables page shows the masked value")
	}
	var v api.ProjectVariable
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/variables/DEPLOY_KEY", proj.ID), nil, &v)
	if v.Value != secret || !v.Masked || !v.Protected {
		t.Fatalf("DEPLOY_KEY after the forms: %+v", v)
	}

	// The developer: no triggers link, no actions on main's schedule, no protected variable.
	dctx := newChrome(t)
	run(t, dctx, "the developer's project page",
		signInWith(inst.URL, developer),
		chromedp.Navigate(projectPage),
		chromedp.WaitVisible(css(`#project-schedules`)))
	if n := count(t, dctx, "the triggers link", `#project-triggers`); n != 0 {
		t.Errorf("the developer's project page links to the trigger tokens")
	}
	run(t, dctx, "the developer's schedules", clickNav(css(`#project-schedules`)), chromedp.WaitVisible(css(`#schedule-%d`, sched.ID)))
	for _, sel := range []string{`#schedules button`, `#schedules a[aria-label^="Edit"]`} {
		if n := count(t, dctx, sel, sel); n != 0 {
			t.Errorf("the developer sees %s on main's schedule (%d)", sel, n)
		}
	}
	run(t, dctx, "the developer's variables",
		chromedp.Navigate(projectPage+"/variables"),
		chromedp.WaitVisible(css(`#variable-LOG_LEVEL a[aria-label="Edit variable LOG_LEVEL"]`)))
	if n := count(t, dctx, "the protected variable", `#variable-DEPLOY_KEY`); n != 0 {
		t.Errorf("the developer's variables page lists the protected DEPLOY_KEY")
	}
	if n := count(t, dctx, "the protected checkbox", `#var-protected`); n != 0 {
		t.Errorf("the developer's form offers protected")
	}

	// The server refuses what the pages hid, to the developer's own session.
	db := newBrowser(t, inst.URL)
	db.signIn(developer)
	triggersPath := fmt.Sprintf("/projects/%d/triggers", proj.ID)
	schedPath := fmt.Sprintf("/projects/%d/pipeline_schedules/%d", proj.ID, sched.ID)
	varsPath := fmt.Sprintf("/projects/%d/variables", proj.ID)
	if resp, _ := db.do("GET", triggersPath, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the developer's trigger tokens page: %d, want 403", resp.StatusCode)
	}
	db.post(triggersPath, url.Values{"description": {"mine"}}, http.StatusForbidden)
	db.post(fmt.Sprintf("%s/%d/delete", triggersPath, trig.ID), nil, http.StatusForbidden)
	db.post(schedPath+"/play", nil, http.StatusForbidden)
	db.post(schedPath, url.Values{"active": {"false"}}, http.StatusForbidden)
	db.post(schedPath+"/delete", nil, http.StatusForbidden)
	db.post(fmt.Sprintf("/projects/%d/pipeline_schedules", proj.ID), url.Values{"description": {"mine"}, "cron": {"* * * * *"}, "ref": {"main"}}, http.StatusForbidden)
	db.post(varsPath+"/DEPLOY_KEY", url.Values{"value": {"stolen-value-1"}, "masked": {"on"}}, http.StatusForbidden)
	db.post(varsPath+"/DEPLOY_KEY/delete", nil, http.StatusForbidden)
	db.post(varsPath, url.Values{"key": {"SNEAKY"}, "value": {"x"}, "protected": {"on"}}, http.StatusForbidden)
	if resp, _ := db.do("GET", varsPath+"/DEPLOY_KEY/edit", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the developer's edit form of DEPLOY_KEY: %d, want 403", resp.StatusCode)
	}
	// Nothing changed.
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/triggers", proj.ID), nil, &triggers)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules", proj.ID), nil, &scheds)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines?source=schedule", proj.ID), nil, &played)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/variables/DEPLOY_KEY", proj.ID), nil, &v)
	var vars []api.ProjectVariable
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/variables", proj.ID), nil, &vars)
	if len(triggers) != 1 || len(scheds) != 1 || !scheds[0].Active || len(played) != 1 || v.Value != secret || len(vars) != 2 {
		t.Fatalf("after the developer's refused forms: %d triggers, schedules %+v, %d schedule pipelines, DEPLOY_KEY %q, %d variables; want all as before",
			len(triggers), scheds, len(played), v.Value, len(vars))
	}

	// The maintainer deletes the trigger, the schedule and a variable.
	run(t, ctx, "the maintainer deletes",
		chromedp.Navigate(fmt.Sprintf("%s/projects/%d/triggers", inst.URL, proj.ID)),
		chromedp.WaitVisible(css(`#trigger-%d`, trig.ID)),
		js(`window.confirm = () => true`),
		clickNav(css(`button[aria-label="Delete trigger %d"]`, trig.ID)),
		waitJS(fmt.Sprintf(`document.getElementById("trigger-%d") === null`, trig.ID)),
		chromedp.Navigate(schedulesPage),
		chromedp.WaitVisible(css(`#schedule-%d`, sched.ID)),
		js(`window.confirm = () => true`),
		clickNav(css(`button[aria-label="Delete schedule %d"]`, sched.ID)),
		waitJS(fmt.Sprintf(`document.getElementById("schedule-%d") === null`, sched.ID)),
		chromedp.Navigate(projectPage+"/variables"),
		chromedp.WaitVisible(css(`#variable-LOG_LEVEL`)),
		js(`window.confirm = () => true`),
		clickNav(css(`button[aria-label="Delete variable LOG_LEVEL"]`)),
		waitJS(`document.getElementById("variable-LOG_LEVEL") === null`))
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/triggers", proj.ID), nil, &triggers)
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipeline_schedules", proj.ID), nil, &scheds)
	if len(triggers) != 0 || len(scheds) != 0 {
		t.Fatalf("after the maintainer's deletes: triggers %+v, schedules %+v", triggers, scheds)
	}
	resp, b = jobapitest.Send(t, inst.URL, "POST", fmt.Sprintf("/api/v4/projects/%d/trigger/pipeline", proj.ID),
		url.Values{"token": {token}, "ref": {"main"}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	jobapitest.WantStatus(t, resp, b, http.StatusNotFound)

	// Every change is audited under the maintainer's web session; the refused ones are not.
	var audit []api.AuditEvent
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/events?per_page=100", nil, &audit)
	seen := map[string]int{}
	for _, e := range audit {
		if !strings.HasPrefix(e.Actor, "mia (web session ") {
			if strings.HasPrefix(e.Actor, "dev") {
				t.Errorf("a refused change of the developer is audited: %+v", e)
			}
			continue
		}
		seen[e.Action]++
	}
	for action, n := range map[string]int{"trigger_created": 1, "trigger_deleted": 1, "schedule_created": 1, "schedule_played": 1,
		"schedule_updated": 2, "schedule_deleted": 1, "variable_created": 2, "variable_updated": 1, "variable_deleted": 1} {
		if seen[action] != n {
			t.Errorf("audit: %d %s by mia's web session, want %d (all by mia: %v)", seen[action], action, n, seen)
		}
	}
}
