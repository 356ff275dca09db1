package accesstest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// caller sends requests with one personal access token.
type caller struct {
	t     *testing.T
	token string
}

func (c caller) do(inst *jobapitest.Instance, method, path string, body any) (*http.Response, []byte) {
	c.t.Helper()
	return jobapitest.Send(c.t, inst.URL, method, "/api/v4"+path, body, "PRIVATE-TOKEN", c.token)
}

// must is do that fails the test unless the status is want, decoding the body into out.
func (c caller) must(inst *jobapitest.Instance, want int, method, path string, body, out any) {
	c.t.Helper()
	resp, b := c.do(inst, method, path, body)
	jobapitest.WantStatus(c.t, resp, b, want)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: decode %.300s: %v", method, path, b, err)
		}
	}
}

// refused checks a refusal: its status and a JSON message.
func (c caller) refused(inst *jobapitest.Instance, want int, method, path string, body any) string {
	c.t.Helper()
	resp, b := c.do(inst, method, path, body)
	return jobapitest.WantJSONError(c.t, resp, b, want)
}

// newUser is an admin's POST /users and a personal access token of that user per scope.
func newUser(t *testing.T, inst *jobapitest.Instance, username string, scopes ...string) (int64, map[string]caller) {
	t.Helper()
	var u api.UserDetail
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/users",
		map[string]any{"username": username, "name": strings.ToUpper(username[:1]) + username[1:], "email": username + "@example.com"}, &u)
	tokens := map[string]caller{}
	for _, scope := range scopes {
		var tok api.PersonalAccessToken
		inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", u.ID),
			map[string]any{"name": scope + " token", "scopes": []string{scope}}, &tok)
		tokens[scope] = caller{t: t, token: tok.Token}
	}
	return u.ID, tokens
}

func addMember(t *testing.T, inst *jobapitest.Instance, project, user int64, level int) {
	t.Helper()
	var m api.Member
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/members", project),
		map[string]any{"user_id": user, "access_level": level}, &m)
	if m.ID != user || m.AccessLevel != level {
		t.Fatalf("member %+v, want user %d at %d", m, user, level)
	}
}

// TestTeam plays a team on two replicas: an admin creates two users and gives them roles on
// project A; the developer retries and plays jobs there but is refused on the protected
// branch, cannot see project B at all (404) nor A's protected variables; the maintainer
// manages variables and a schedule; a read_api token reads but cannot retry; once removed,
// the developer's token is refused on A by both replicas at its next request.
func TestTeam(t *testing.T) {
	t.Parallel()
	one := jobapitest.Start(t, jobapitest.Options{})
	two := one.Replica(t, jobapitest.Options{})
	var a, b api.Project
	one.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "alpha"}, &a)
	one.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "beta"}, &b)

	devID, dev := newUser(t, one, "dana", "api", "read_api")
	maintID, maint := newUser(t, one, "milo", "api")
	addMember(t, one, a.ID, devID, 30)
	addMember(t, one, a.ID, maintID, 40)
	runner := one.NewRunner(t)

	// The developer runs a pipeline on an unprotected branch, retries its failed job and
	// plays its manual one.
	var p api.Pipeline
	dev["api"].must(two, http.StatusCreated, "POST", fmt.Sprintf("/projects/%d/pipeline", a.ID), map[string]any{
		"ref": "feature", "stages": []string{"test"}, "jobs": []map[string]any{
			{"name": "unit", "stage": "test", "script": []string{"make test"}},
			{"name": "deploy", "stage": "test", "script": []string{"./deploy"}, "when": "manual"},
		}}, &p)
	job := runner.TakeNamed(t, "unit")
	runner.Finish(t, job, runnerclient.StateFailed, "script_failure")
	var retried api.JobDetail
	dev["api"].must(one, http.StatusCreated, "POST", fmt.Sprintf("/projects/%d/jobs/%d/retry", a.ID, job.ID), nil, &retried)
	if retried.Name != "unit" || retried.ID == job.ID {
		t.Fatalf("retry answered %+v", retried)
	}
	deploy := jobapitest.JobID(t, p, "deploy")
	dev["api"].must(two, http.StatusOK, "POST", fmt.Sprintf("/projects/%d/jobs/%d/play", a.ID, deploy), nil, nil)

	// main is protected (maintainers push and merge): the developer may not run, retry or
	// play there; the maintainer may.
	msg := dev["api"].refused(one, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/pipeline", a.ID), map[string]any{
		"ref": "main", "stages": []string{"test"}, "jobs": []map[string]any{{"name": "unit", "stage": "test", "script": []string{"make"}}}})
	if !strings.Contains(msg, "protected") {
		t.Errorf("run on main: %q, want it to say main is protected", msg)
	}
	var onMain api.Pipeline
	maint["api"].must(one, http.StatusCreated, "POST", fmt.Sprintf("/projects/%d/pipeline", a.ID), map[string]any{
		"ref": "main", "stages": []string{"test"}, "jobs": []map[string]any{
			{"name": "release", "stage": "test", "script": []string{"./release"}, "when": "manual"},
		}}, &onMain)
	release := jobapitest.JobID(t, onMain, "release")
	dev["api"].refused(two, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/jobs/%d/play", a.ID, release), nil)
	dev["api"].refused(two, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/pipelines/%d/cancel", a.ID, onMain.ID), nil)
	maint["api"].must(two, http.StatusOK, "POST", fmt.Sprintf("/projects/%d/jobs/%d/play", a.ID, release), nil, nil)

	// Project B does not exist for the developer, on any route; its list holds A only.
	for _, path := range []string{"", "/pipelines", "/variables", "/members", fmt.Sprintf("/jobs/%d", job.ID)} {
		dev["api"].refused(one, http.StatusNotFound, "GET", fmt.Sprintf("/projects/%d%s", b.ID, path), nil)
	}
	dev["api"].refused(two, http.StatusNotFound, "POST", fmt.Sprintf("/projects/%d/pipelines/%d/retry", b.ID, p.ID), nil)
	var mine []api.Project
	dev["read_api"].must(one, http.StatusOK, "GET", "/projects", nil, &mine)
	if len(mine) != 1 || mine[0].ID != a.ID {
		t.Errorf("the developer's projects: %+v, want alpha only", mine)
	}

	// Variables: the maintainer manages protected ones; the developer sees and writes only
	// the unprotected.
	varsPath := fmt.Sprintf("/projects/%d/variables", a.ID)
	maint["api"].must(one, http.StatusCreated, "POST", varsPath, map[string]any{"key": "DEPLOY_KEY", "value": "s3cret-value", "protected": true}, nil)
	maint["api"].must(two, http.StatusOK, "PUT", varsPath+"/DEPLOY_KEY", map[string]any{"value": "s3cret-value-2"}, nil)
	dev["api"].must(one, http.StatusCreated, "POST", varsPath, map[string]any{"key": "LOG_LEVEL", "value": "debug"}, nil)
	var seen []api.ProjectVariable
	dev["api"].must(two, http.StatusOK, "GET", varsPath, nil, &seen)
	if len(seen) != 1 || seen[0].Key != "LOG_LEVEL" {
		t.Errorf("the developer's variables: %+v, want LOG_LEVEL only", seen)
	}
	dev["api"].refused(one, http.StatusForbidden, "GET", varsPath+"/DEPLOY_KEY", nil)
	dev["api"].refused(one, http.StatusForbidden, "PUT", varsPath+"/DEPLOY_KEY", map[string]any{"value": "mine-now-1234"})
	dev["api"].refused(one, http.StatusForbidden, "DELETE", varsPath+"/DEPLOY_KEY", nil)
	dev["api"].refused(one, http.StatusForbidden, "PUT", varsPath+"/LOG_LEVEL", map[string]any{"protected": true})
	dev["api"].refused(two, http.StatusForbidden, "POST", varsPath, map[string]any{"key": "OTHER", "value": "x", "protected": true})
	var v api.ProjectVariable
	maint["api"].must(two, http.StatusOK, "GET", varsPath+"/DEPLOY_KEY", nil, &v)
	if v.Value != "s3cret-value-2" {
		t.Errorf("DEPLOY_KEY = %q after the developer's refused change", v.Value)
	}
	maint["api"].must(one, http.StatusNoContent, "DELETE", varsPath+"/DEPLOY_KEY", nil, nil)

	// A schedule, the maintainer's to create, change and delete.
	var s api.PipelineSchedule
	maint["api"].must(one, http.StatusCreated, "POST", fmt.Sprintf("/projects/%d/pipeline_schedules", a.ID),
		map[string]any{"description": "nightly", "ref": "main", "cron": "0 1 * * *"}, &s)
	if s.Owner == nil || s.Owner.ID != maintID || s.Owner.Username != "milo" {
		t.Errorf("schedule's owner = %+v, want milo (user %d), who created it", s.Owner, maintID)
	}
	maint["api"].must(two, http.StatusOK, "PUT", fmt.Sprintf("/projects/%d/pipeline_schedules/%d", a.ID, s.ID),
		map[string]any{"cron": "0 2 * * *"}, nil)
	// A schedule runs on its ref: a developer may schedule the feature branch, not main, and
	// may not change or play the maintainer's schedule of main.
	dev["api"].refused(two, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/pipeline_schedules", a.ID),
		map[string]any{"description": "mine", "ref": "main", "cron": "0 3 * * *"})
	dev["api"].refused(two, http.StatusForbidden, "PUT", fmt.Sprintf("/projects/%d/pipeline_schedules/%d", a.ID, s.ID),
		map[string]any{"cron": "* * * * *"})
	dev["api"].refused(two, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/pipeline_schedules/%d/variables", a.ID, s.ID),
		map[string]any{"key": "INJECTED", "value": "1"})
	var mineSchedule api.PipelineSchedule
	dev["api"].must(one, http.StatusCreated, "POST", fmt.Sprintf("/projects/%d/pipeline_schedules", a.ID),
		map[string]any{"description": "mine", "ref": "feature", "cron": "0 3 * * *"}, &mineSchedule)
	dev["api"].refused(one, http.StatusForbidden, "PUT", fmt.Sprintf("/projects/%d/pipeline_schedules/%d", a.ID, mineSchedule.ID),
		map[string]any{"ref": "main"})
	maint["api"].must(one, http.StatusNoContent, "DELETE", fmt.Sprintf("/projects/%d/pipeline_schedules/%d", a.ID, s.ID), nil, nil)
	// Maintainers' and owners' things stay out of the developer's reach.
	dev["api"].refused(one, http.StatusForbidden, "GET", fmt.Sprintf("/projects/%d/triggers", a.ID), nil)
	dev["api"].refused(one, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/members", a.ID), map[string]any{"user_id": maintID, "access_level": 50})
	maint["api"].refused(one, http.StatusForbidden, "DELETE", fmt.Sprintf("/projects/%d/pipelines/%d", a.ID, p.ID), nil)

	// A read_api token reads, and cannot retry.
	dev["read_api"].must(two, http.StatusOK, "GET", fmt.Sprintf("/projects/%d/pipelines", a.ID), nil, nil)
	dev["read_api"].must(two, http.StatusOK, "GET", fmt.Sprintf("/projects/%d/jobs/%d/trace", a.ID, job.ID), nil, nil)
	msg = dev["read_api"].refused(one, http.StatusForbidden, "POST", fmt.Sprintf("/projects/%d/jobs/%d/retry", a.ID, retried.ID), nil)
	if !strings.Contains(msg, "insufficient_scope") {
		t.Errorf("read_api retry: %q, want insufficient_scope", msg)
	}

	// The maintainer removes the developer: both replicas refuse the developer's token on A
	// at its next request (both answered it a moment ago).
	for _, inst := range []*jobapitest.Instance{one, two} {
		dev["api"].must(inst, http.StatusOK, "GET", fmt.Sprintf("/projects/%d/pipelines/%d", a.ID, p.ID), nil, nil)
	}
	maint["api"].must(one, http.StatusNoContent, "DELETE", fmt.Sprintf("/projects/%d/members/%d", a.ID, devID), nil, nil)
	for _, inst := range []*jobapitest.Instance{one, two} {
		dev["api"].refused(inst, http.StatusNotFound, "GET", fmt.Sprintf("/projects/%d/pipelines/%d", a.ID, p.ID), nil)
		dev["read_api"].refused(inst, http.StatusNotFound, "GET", fmt.Sprintf("/projects/%d/jobs/%d/trace", a.ID, job.ID), nil)
		dev["api"].refused(inst, http.StatusNotFound, "POST", fmt.Sprintf("/projects/%d/jobs/%d/retry", a.ID, retried.ID), nil)
	}
	dev["read_api"].must(two, http.StatusOK, "GET", "/projects", nil, &mine)
	if len(mine) != 0 {
		t.Errorf("the removed developer's projects: %+v, want none", mine)
	}
}

// TestLastOwner: no change may leave a project without an owner (400), and only owners
// manage owners.
func TestLastOwner(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "solo"}, &p)
	ownerID, ownerTokens := newUser(t, inst, "olga", "api")
	maintID, maintTokens := newUser(t, inst, "max", "api")
	owner, maint := ownerTokens["api"], maintTokens["api"]
	addMember(t, inst, p.ID, ownerID, 50)
	addMember(t, inst, p.ID, maintID, 40)
	member := func(id int64) string { return fmt.Sprintf("/projects/%d/members/%d", p.ID, id) }

	owner.refused(inst, http.StatusBadRequest, "PUT", member(ownerID), map[string]any{"access_level": 40})
	owner.refused(inst, http.StatusBadRequest, "DELETE", member(ownerID), nil)
	resp, body := inst.Do(t, "DELETE", "/api/v4"+member(ownerID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest) // the admin too
	maint.refused(inst, http.StatusForbidden, "PUT", member(maintID), map[string]any{"access_level": 50})
	maint.refused(inst, http.StatusForbidden, "DELETE", member(ownerID), nil)
	maint.refused(inst, http.StatusBadRequest, "PUT", member(maintID), map[string]any{"access_level": 35})
	maint.refused(inst, http.StatusBadRequest, "POST", fmt.Sprintf("/projects/%d/members", p.ID), map[string]any{"access_level": 30})

	// A second owner makes the first one's step down possible.
	owner.must(inst, http.StatusOK, "PUT", member(maintID), map[string]any{"access_level": 50}, nil)
	owner.must(inst, http.StatusOK, "PUT", member(ownerID), map[string]any{"access_level": 30}, nil)
	var all []api.Member
	maint.must(inst, http.StatusOK, "GET", fmt.Sprintf("/projects/%d/members/all", p.ID), nil, &all)
	if len(all) != 2 || all[0].AccessLevel != 30 || all[1].AccessLevel != 50 {
		t.Errorf("members %+v, want olga developer and max owner", all)
	}
}

// TestPythonGitlabMembers: python-gitlab's project.members (create, list, get, save, delete)
// and members_all work against jobapi, and a member's token sees the project until removed.
func TestPythonGitlabMembers(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "py"}, &p)
	uid, tokens := newUser(t, inst, "pyuser", "api")
	out, err := exec.Command(python, "testdata/members.py", inst.URL, jobapitest.AdminToken, fmt.Sprint(p.ID), fmt.Sprint(uid),
		tokens["api"].token).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}

// TestLeaveProject: a member ends its own membership with DELETE of itself from
// /projects/:id/members (GitLab's "leave project"), whatever its role, while removing anyone
// else stays a maintainer's; the last owner cannot leave (400), one of two owners can.
func TestLeaveProject(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "leavers"}, &p)
	guestID, guest := newUser(t, inst, "gus", "api")
	devID, dev := newUser(t, inst, "deb", "api")
	ownerID, owner := newUser(t, inst, "oona", "api")
	coOwnerID, coOwner := newUser(t, inst, "otto", "api")
	addMember(t, inst, p.ID, guestID, 10)
	addMember(t, inst, p.ID, devID, 30)
	addMember(t, inst, p.ID, ownerID, 50)
	member := func(id int64) string { return fmt.Sprintf("/projects/%d/members/%d", p.ID, id) }

	// A developer may not remove someone else, and a guest leaves on its own.
	dev["api"].refused(inst, http.StatusForbidden, "DELETE", member(guestID), nil)
	guest["api"].must(inst, http.StatusNoContent, "DELETE", member(guestID), nil, nil)
	guest["api"].refused(inst, http.StatusNotFound, "GET", fmt.Sprintf("/projects/%d", p.ID), nil)
	guest["api"].refused(inst, http.StatusNotFound, "DELETE", member(guestID), nil)
	dev["api"].must(inst, http.StatusNoContent, "DELETE", member(devID), nil, nil)

	// The only owner stays; with a second owner, the first may go.
	msg := owner["api"].refused(inst, http.StatusBadRequest, "DELETE", member(ownerID), nil)
	if !strings.Contains(msg, "owner") {
		t.Errorf("the last owner leaving: %q, want it to say the project needs an owner", msg)
	}
	addMember(t, inst, p.ID, coOwnerID, 50)
	owner["api"].must(inst, http.StatusNoContent, "DELETE", member(ownerID), nil, nil)
	coOwner["api"].refused(inst, http.StatusBadRequest, "DELETE", member(coOwnerID), nil)
	var left []api.Member
	coOwner["api"].must(inst, http.StatusOK, "GET", fmt.Sprintf("/projects/%d/members", p.ID), nil, &left)
	if len(left) != 1 || left[0].ID != coOwnerID {
		t.Errorf("members after three left: %+v, want otto only", left)
	}
}
