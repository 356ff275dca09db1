package projecttest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// protectedRunner registers a runner with access_level (the operator's POST /user/runners).
func protectedRunner(t testing.TB, inst *jobapitest.Instance, accessLevel string) (int64, string) {
	t.Helper()
	var out api.RunnerCreated
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/user/runners",
		map[string]any{"description": accessLevel, "tag_list": []string{}, "run_untagged": true, "access_level": accessLevel}, &out)
	return out.ID, out.Token
}

// refPipeline creates a one-job pipeline on ref in project.
func refPipeline(t testing.TB, inst *jobapitest.Instance, projectID int64, ref, name string) api.Pipeline {
	t.Helper()
	var p api.Pipeline
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline", projectID), map[string]any{
		"ref": ref, "stages": []string{"test"},
		"jobs": []map[string]any{{"name": name, "stage": "test", "script": "true"}}}, &p)
	return p
}

// TestRefProtectedRunner is the security review's finding: a runner registered with access_level
// ref_protected took a job of an unprotected ref. It takes only jobs of protected refs (the
// default branch, protected when the project is created); a not_protected runner takes any.
func TestRefProtectedRunner(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app"}, &project)
	_, protTok := protectedRunner(t, inst, "ref_protected")
	_, anyTok := protectedRunner(t, inst, "not_protected")

	feature := refPipeline(t, inst, project.ID, "feature/x", "unprotected-job")
	jobapitest.WantNoJob(t, inst.URL, protTok)

	main := refPipeline(t, inst, project.ID, "main", "protected-job")
	job := jobapitest.TakeJob(t, inst.URL, protTok)
	if job.JobInfo.PipelineID != main.ID || !job.GitInfo.Protected {
		t.Fatalf("the ref_protected runner took job %s of pipeline %d (protected %v), want the job of main's pipeline %d",
			job.JobInfo.Name, job.JobInfo.PipelineID, job.GitInfo.Protected, main.ID)
	}
	jobapitest.FinishJob(t, inst.URL, job, "success", "", 0)
	jobapitest.WantNoJob(t, inst.URL, protTok)

	job = jobapitest.TakeJob(t, inst.URL, anyTok)
	if job.JobInfo.PipelineID != feature.ID || job.GitInfo.Protected {
		t.Fatalf("the not_protected runner took pipeline %d (protected %v), want the feature pipeline %d",
			job.JobInfo.PipelineID, job.GitInfo.Protected, feature.ID)
	}
	jobapitest.FinishJob(t, inst.URL, job, "success", "", 0)
}

// TestRefProtectedRunnerEmptyProfile: a ref_protected runner's claim that found nothing
// after a bump is remembered for its profile (emptyProfiles, claimFlights); a not_protected
// runner with the same tags is another profile, and still gets the unprotected build that
// the other could not take, instead of a 204 from that record.
func TestRefProtectedRunnerEmptyProfile(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	_, protTok := protectedRunner(t, inst, "ref_protected")
	_, anyTok := protectedRunner(t, inst, "not_protected")
	prot := jobapitest.NewRunner(t, inst.URL, protTok, "s_prot0")
	open := jobapitest.NewRunner(t, inst.URL, anyTok, "s_open0")
	prot.NoJob(t) // both learn the queue version
	open.NoJob(t)
	p := refPipeline(t, inst, 1, "feature", "unprotected-job") // project 1 has no row: main only is protected
	prot.NoJob(t)
	job := open.Take(t)
	if job.ID != p.Jobs[0].ID {
		t.Fatalf("took job %d, want %d", job.ID, p.Jobs[0].ID)
	}
	open.Finish(t, job, "success", "")
	refPipeline(t, inst, 1, "main", "protected-job")
	if j := prot.Take(t); j.JobInfo.Name != "protected-job" {
		t.Fatalf("the ref_protected runner took %q", j.JobInfo.Name)
	}
}

// TestLongPollRefProtected: ref_protected and not_protected runners with the same tags are
// held on a long-poll replica; an unprotected build wakes a not_protected runner only (no
// ref_protected one comes back with a 204 for it), a protected build is handed out too.
func TestLongPollRefProtected(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	held := inst.LongPollReplica(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var prot, open []*jobapitest.Poller
	for i := range 6 {
		level := "ref_protected"
		if i%2 == 1 {
			level = "not_protected"
		}
		_, token := protectedRunner(t, inst, level)
		r := jobapitest.NewRunner(t, held.URL, token, fmt.Sprintf("s_lpp%d", i))
		r.NoJob(t)
		pl := jobapitest.StartPoller(t, ctx, r)
		if level == "ref_protected" {
			prot = append(prot, pl)
		} else {
			open = append(open, pl)
		}
	}
	held.WaitHeld(t, 6)
	p := refPipeline(t, inst, 1, "feature", "unprotected-job")
	// firstHandout's readers last as long as the context it is given: this phase's only.
	phase, endPhase := context.WithCancel(ctx)
	jobapitest.FirstHandout(t, phase, open, p.Jobs[0].ID, "the unprotected job was not handed out: no not_protected runner was woken")
	endPhase()
	held.WaitHeld(t, 5)
	for i, pl := range prot {
		if n := pl.NoJobs.Load(); n != 0 {
			t.Errorf("ref_protected runner %d was answered 204 %d times after the unprotected job: woken for nothing", i, n)
		}
		select {
		case id := <-pl.Got:
			t.Fatalf("ref_protected runner %d took job %d", i, id)
		default:
		}
	}
	p = refPipeline(t, inst, 1, "main", "protected-job")
	// The poller that took the unprotected job asks no more; any other may take this one.
	jobapitest.FirstHandout(t, ctx, append(append([]*jobapitest.Poller{}, prot...), open...), p.Jobs[0].ID, "the protected job was not handed out")
}

// TestRefProtectedRunnersRace: ref_protected and not_protected runners poll at once, on two
// replicas, for protected and unprotected builds: every build is handed out exactly once,
// and no ref_protected runner gets an unprotected one.
func TestRefProtectedRunnersRace(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	replicas := []*jobapitest.Instance{inst, inst.Replica(t, jobapitest.Options{})}
	type racer struct {
		r         *jobapitest.Runner
		protected bool
	}
	var racers []racer
	for i := range 12 {
		level := map[bool]string{true: "ref_protected", false: "not_protected"}[i%3 != 0]
		_, token := protectedRunner(t, inst, level)
		racers = append(racers, racer{jobapitest.NewRunner(t, replicas[i%2].URL, token, fmt.Sprintf("s_race%d", i)), level == "ref_protected"})
	}
	want := map[int64]bool{} // job id → protected
	for k := range 10 {
		for _, ref := range []string{"main", "feature"} {
			p := refPipeline(t, inst, 1, ref, fmt.Sprintf("%s-%d", ref, k))
			want[p.Jobs[0].ID] = ref == "main"
		}
	}
	var (
		mu    sync.Mutex
		taken = map[int64]int{}
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, rc := range racers {
		wg.Go(func() {
			for ctx.Err() == nil {
				job, res, err := rc.r.RequestJob(ctx)
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					t.Errorf("request job: %v", err)
					return
				case job == nil && res.Code != http.StatusNoContent && res.Code != http.StatusConflict:
					t.Errorf("request job: %d %s", res.Code, res.Message)
					return
				case job == nil:
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if rc.protected && !want[job.ID] {
					t.Errorf("a ref_protected runner took the unprotected job %d (%s)", job.ID, job.JobInfo.Name)
				}
				mu.Lock()
				taken[job.ID]++
				mu.Unlock()
				rc.r.Finish(t, job, "success", "")
			}
		})
	}
	testenv.Eventually(t, time.Minute, "every job handed out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(taken) >= len(want)
	})
	cancel()
	wg.Wait()
	for id := range want {
		if taken[id] != 1 {
			t.Errorf("job %d handed out %d times", id, taken[id])
		}
	}
}

// TestProtectedRefsAPI: GitLab's protected_branches and protected_tags calls and shapes: the
// default branch protected at the project's creation, a wildcard name, URL-encoded names in
// the path, parameters in the query string (GitLab's documented form) or the body, 409 for a
// name protected already, 404 for an unknown project or name, 400 naming the bad field.
func TestProtectedRefsAPI(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "default_branch": "trunk"}, &project)
	base := fmt.Sprintf("/api/v4/projects/%d", project.ID)
	maint := []api.RefAccessLevel{{AccessLevel: 40, AccessLevelDescription: "Maintainers"}}
	levels := func(l []api.RefAccessLevel) []api.RefAccessLevel { // ids aside
		out := []api.RefAccessLevel{}
		for _, a := range l {
			a.ID = 0
			out = append(out, a)
		}
		return out
	}

	var branches []api.ProtectedBranch
	inst.MustDo(t, http.StatusOK, "GET", base+"/protected_branches", nil, &branches)
	if len(branches) != 1 || branches[0].Name != "trunk" || branches[0].ID == 0 ||
		fmt.Sprint(levels(branches[0].PushAccessLevels)) != fmt.Sprint(maint) || fmt.Sprint(levels(branches[0].MergeAccessLevels)) != fmt.Sprint(maint) {
		t.Fatalf("a new project's protected branches %+v, want its default branch trunk, maintainers", branches)
	}

	var rel api.ProtectedBranch
	inst.MustDo(t, http.StatusCreated, "POST", base+"/protected_branches",
		map[string]any{"name": "release/*", "push_access_level": 30, "merge_access_level": "40", "allow_force_push": true}, &rel)
	if rel.Name != "release/*" || !rel.AllowForcePush || rel.CodeOwnerApprovalRequired ||
		fmt.Sprint(levels(rel.PushAccessLevels)) != fmt.Sprint([]api.RefAccessLevel{{AccessLevel: 30, AccessLevelDescription: "Developers + Maintainers"}}) {
		t.Errorf("created %+v", rel)
	}
	resp, b := inst.Do(t, "POST", base+"/protected_branches?name=*-stable&push_access_level=0", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	resp, b = inst.Do(t, "POST", base+"/protected_branches", map[string]any{"name": "release/*"})
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusConflict); !strings.Contains(msg, "release/*") {
		t.Errorf("duplicate: %q", msg)
	}
	for _, c := range []struct {
		body  any
		field string
	}{
		{map[string]any{"push_access_level": 40}, "name"},
		{map[string]any{"name": "x", "push_access_level": 35}, "push_access_level"},
		{map[string]any{"name": "x", "create_access_level": 40}, "create_access_level"},
		{map[string]any{"name": "bad name"}, "name"},
		{map[string]any{"name": "x", "colour": "red"}, "colour"},
	} {
		resp, b = inst.Do(t, "POST", base+"/protected_branches", c.body)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, c.field) {
			t.Errorf("%v: message %q does not name %s", c.body, msg, c.field)
		}
	}
	resp, b = inst.Do(t, "POST", "/api/v4/projects/9999/protected_branches", map[string]any{"name": "main"})
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	resp, b = inst.Do(t, "GET", "/api/v4/projects/9999/protected_branches", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)

	var got api.ProtectedBranch
	inst.MustDo(t, http.StatusOK, "GET", base+"/protected_branches/release%2F%2A", nil, &got)
	if got.ID != rel.ID {
		t.Errorf("GET release%%2F%%2A = %+v, want %+v", got, rel)
	}
	resp, b = inst.Do(t, "GET", base+"/protected_branches/release%2F1.0", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound) // a name, not a match
	resp, b = inst.Do(t, "GET", base+"/protected_branches?per_page=2&page=2", nil)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if page := jobapitest.Decode[[]api.ProtectedBranch](t, b); resp.Header.Get("X-Total") != "3" || len(page) != 1 || page[0].Name != "trunk" {
		t.Errorf("page 2 of 2: %+v, X-Total %q; want [trunk] of 3 (by name)", page, resp.Header.Get("X-Total"))
	}

	var tag api.ProtectedTag
	inst.MustDo(t, http.StatusCreated, "POST", base+"/protected_tags", map[string]any{"name": "v*", "create_access_level": 30}, &tag)
	if tag.Name != "v*" || fmt.Sprint(levels(tag.CreateAccessLevels)) != fmt.Sprint([]api.RefAccessLevel{{AccessLevel: 30, AccessLevelDescription: "Developers + Maintainers"}}) {
		t.Errorf("protected tag %+v", tag)
	}
	resp, b = inst.Do(t, "POST", base+"/protected_tags", map[string]any{"name": "x", "push_access_level": 40})
	if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "push_access_level") {
		t.Errorf("push_access_level on a tag: %q", msg)
	}
	var tags []api.ProtectedTag
	inst.MustDo(t, http.StatusOK, "GET", base+"/protected_tags", nil, &tags)
	if len(tags) != 1 || tags[0].Name != "v*" {
		t.Errorf("protected tags %+v", tags)
	}

	inst.MustDo(t, http.StatusNoContent, "DELETE", base+"/protected_branches/release%2F%2A", nil, nil)
	resp, b = inst.Do(t, "DELETE", base+"/protected_branches/release%2F%2A", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	inst.MustDo(t, http.StatusNoContent, "DELETE", base+"/protected_tags/v%2A", nil, nil)
	resp, b = inst.Do(t, "GET", base+"/protected_tags/v%2A", nil)
	jobapitest.WantJSONError(t, resp, b, http.StatusNotFound)
	resp, b = inst.Do(t, "GET", base+"/protected_branches", nil, "PRIVATE-TOKEN", "wrong")
	jobapitest.WantJSONError(t, resp, b, http.StatusUnauthorized)
}

// TestProtectedRefsInJobs: what the list decides for a job, at its pipeline's creation:
// CI_COMMIT_REF_PROTECTED and git_info.protected, the project's protected variables (only on
// protected refs), and the cache key suffix (-protected / -non_protected; unprotect: true
// shares the unprotected cache). A tag is protected by the tag list, a branch by the branch
// list, wildcards as GitLab's. Unprotecting a name changes new pipelines, not one created.
func TestProtectedRefsInJobs(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app"}, &project)
	base := fmt.Sprintf("/api/v4/projects/%d", project.ID)
	inst.MustDo(t, http.StatusCreated, "POST", base+"/variables", map[string]any{"key": "DEPLOY_KEY", "value": "only-protected", "protected": true}, nil)
	inst.MustDo(t, http.StatusCreated, "POST", base+"/protected_branches", map[string]any{"name": "release/*"}, nil)
	inst.MustDo(t, http.StatusCreated, "POST", base+"/protected_tags", map[string]any{"name": "v*"}, nil)
	_, token := inst.CreateRunner(t)

	const config = `
build:
  script: [make]
  cache:
    - {key: deps, paths: [vendor/]}
    - {key: shared, paths: [tmp/], unprotect: true}
`
	create := func(ref string) api.Pipeline {
		t.Helper()
		resp, b := inst.Do(t, "POST", base+"/pipeline?ref="+url.QueryEscape(ref), config, "Content-Type", "application/yaml")
		jobapitest.WantStatus(t, resp, b, http.StatusCreated)
		return jobapitest.Decode[api.Pipeline](t, b)
	}
	check := func(ref string, want bool) {
		t.Helper()
		job := jobapitest.TakeJob(t, inst.URL, token)
		vars := jobapitest.JobVariables(job)
		suffix := map[bool]string{true: "-protected", false: "-non_protected"}[want]
		if job.GitInfo.Protected != want || vars["CI_COMMIT_REF_PROTECTED"].Value != fmt.Sprint(want) {
			t.Errorf("%s: git_info.protected %v, CI_COMMIT_REF_PROTECTED %q; want %v", ref, job.GitInfo.Protected, vars["CI_COMMIT_REF_PROTECTED"].Value, want)
		}
		if _, ok := vars["DEPLOY_KEY"]; ok != want {
			t.Errorf("%s: the protected variable given %v, want %v", ref, ok, want)
		}
		if len(job.Cache) != 2 || job.Cache[0].Key != "deps"+suffix || job.Cache[1].Key != "shared-non_protected" {
			t.Errorf("%s: cache keys %+v, want deps%s and shared-non_protected", ref, job.Cache, suffix)
		}
		jobapitest.FinishJob(t, inst.URL, job, "success", "", 0)
	}
	for _, c := range []struct {
		ref  string
		want bool
	}{
		{"main", true}, {"refs/heads/main", true}, {"release/1.0", true}, {"release/a/b", true},
		{"feature/x", false}, {"releases/1", false}, {"refs/tags/v1.2.0", true}, {"refs/tags/release/1", false},
		{"v1.2.0", false}, // a branch named v1.2.0: the tag list does not protect it
	} {
		create(c.ref)
		check(c.ref, c.want)
	}

	// Decided at creation: a pipeline created while release/* is protected stays protected.
	create("release/2.0")
	inst.MustDo(t, http.StatusNoContent, "DELETE", base+"/protected_branches/release%2F%2A", nil, nil)
	check("release/2.0 (created before the unprotect)", true)
	create("release/3.0")
	check("release/3.0 (created after)", false)
}

// TestPythonGitlabProtectedRefs runs python-gitlab (Debian's python3-gitlab) on the
// protected_branches and protected_tags calls: list, create, get by an encoded wildcard
// name, 409 on a duplicate, delete, 404 after (testdata/protected_refs.py).
func TestPythonGitlabProtectedRefs(t *testing.T) {
	t.Parallel()
	python := jobapitest.PythonGitlab(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app"}, &project)
	out, err := exec.Command(python, "testdata/protected_refs.py", inst.URL, jobapitest.AdminToken, fmt.Sprint(project.ID)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("python-gitlab: %v\n%s", err, out)
	}
}

// TestRunnerAccessLevel: access_level through every way a runner gets one: gitlab-runner
// register --access-level (POST /runners with a registration token), the operator's POST
// /user/runners (JSON or form) and PUT /runners/:id, shown on GET; a value GitLab does not
// have is a 400 naming the field. A runner changed to ref_protected stops taking
// unprotected builds at once (every replica drops its cached copy).
func TestRunnerAccessLevel(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.RunnerRegistrationToken = "reg-secret-token" }})
	level := func(id int64) string {
		t.Helper()
		var rn api.Runner
		inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/runners/%d", id), nil, &rn)
		return rn.AccessLevel
	}
	reg := runnerclient.New(inst.URL, "", "s_regprot")
	if err := reg.RegisterCommand(context.Background(), "reg-secret-token", runnerclient.RegisterParameters{
		Description: "registered", RunUntagged: true, AccessLevel: "ref_protected"}); err != nil {
		t.Fatalf("register --access-level ref_protected: %v", err)
	}
	if got := level(reg.ID); got != "ref_protected" {
		t.Errorf("registered with --access-level ref_protected: access_level %q", got)
	}
	plain, plainToken := inst.CreateRunner(t)
	if got := level(plain); got != "not_protected" {
		t.Errorf("a runner created without access_level has %q, want GitLab's default not_protected", got)
	}
	const formType = "application/x-www-form-urlencoded"
	resp, b := inst.Do(t, "POST", "/api/v4/user/runners", url.Values{"access_level": {"ref_protected"}}.Encode(), "Content-Type", formType)
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	if got := level(jobapitest.Decode[api.RunnerCreated](t, b).ID); got != "ref_protected" {
		t.Errorf("form-created: access_level %q", got)
	}
	for _, req := range []struct {
		body  any
		ctype string
	}{{map[string]any{"access_level": "protected"}, "application/json"}, {url.Values{"access_level": {"all"}}.Encode(), formType}} {
		resp, b := inst.Do(t, "POST", "/api/v4/user/runners", req.body, "Content-Type", req.ctype)
		if msg := jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest); !strings.Contains(msg, "access_level") {
			t.Errorf("bad access_level: %q", msg)
		}
	}
	resp, b = jobapitest.Send(t, inst.URL, "POST", "/api/v4/runners", map[string]any{"token": "reg-secret-token", "access_level": "x"})
	jobapitest.WantJSONError(t, resp, b, http.StatusBadRequest)

	// PUT: the runner that took an unprotected build a moment ago takes none once ref_protected.
	runner := jobapitest.NewRunner(t, inst.URL, plainToken, "s_plain")
	refPipeline(t, inst, 1, "feature", "first")
	runner.Finish(t, runner.Take(t), "success", "")
	var rn api.Runner
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/runners/%d", plain), map[string]any{"access_level": "ref_protected"}, &rn)
	if rn.AccessLevel != "ref_protected" {
		t.Errorf("PUT answered access_level %q", rn.AccessLevel)
	}
	refPipeline(t, inst, 1, "feature", "second")
	runner.NoJob(t)
	resp, b = inst.Do(t, "PUT", fmt.Sprintf("/api/v4/runners/%d", plain), url.Values{"access_level": {"not_protected"}}.Encode(), "Content-Type", formType)
	jobapitest.WantStatus(t, resp, b, http.StatusOK)
	if j := runner.Take(t); j.JobInfo.Name != "second" {
		t.Errorf("took %q, want second", j.JobInfo.Name)
	}
}
