package sourcetest_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// triggerRepo makes a bare repository in the parent-child shape: a service's pipeline in
// its own directory, a child that nests a grandchild, and a broken one.
func triggerRepo(t *testing.T) (bare, sha string) {
	t.Helper()
	m := newMonorepo(t)
	files := map[string]string{
		"services/api/.gitlab-ci.yml": `
stages: [build, test]
api-build:
  stage: build
  script: make -C services/api
api-test:
  stage: test
  script: echo "$SERVICE $CI_PIPELINE_SOURCE $PARENT_ONLY"
`,
		"services/web/ci.yml": "web-build:\n  script: npm run build\n",
		"nested/child.yml":    "grandchild:\n  trigger:\n    include: nested/grandchild.yml\n    strategy: depend\n",
		"nested/grandchild.yml": "leaf:\n  script: echo leaf\n  " +
			"\ndeeper:\n  trigger:\n    include: nested/grandchild.yml\n",
		"broken.yml": "job:\n  script: [[[\n",
	}
	return m.Bare, m.Commit(files)
}

const parentCI = `
stages: [build, services, deploy]
variables:
  GLOBAL: g
build:
  stage: build
  script: make
api:
  stage: services
  variables:
    SERVICE: api
  trigger:
    include: services/api/.gitlab-ci.yml
    strategy: depend
web:
  stage: services
  trigger:
    include:
      - local: services/web/ci.yml
deploy:
  stage: deploy
  script: ./deploy
`

func bridges(t *testing.T, inst *jobapitest.Instance, projectID, pipelineID int64) []api.Bridge {
	t.Helper()
	var out []api.Bridge
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/bridges", projectID, pipelineID), nil, &out)
	return out
}

func bridgeNamed(t *testing.T, list []api.Bridge, name string) api.Bridge {
	t.Helper()
	for _, b := range list {
		if b.Name == name && b.RetriedBy == nil {
			return b
		}
	}
	t.Fatalf("no bridge %q in %+v", name, list)
	return api.Bridge{}
}

func bridgePass(t *testing.T, inst *jobapitest.Instance) int {
	t.Helper()
	n, err := inst.Server.Bridges.CreateOnce(context.Background())
	if err != nil {
		t.Fatalf("bridge pass: %v", err)
	}
	return n
}

func getPipeline(t *testing.T, inst *jobapitest.Instance, projectID, id int64) api.Pipeline {
	t.Helper()
	var p api.Pipeline
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d", projectID, id), nil, &p)
	return p
}

// TestChildPipelineWithDepend: a parent triggers two children from files of its commit; the
// children's jobs run on a runner with source parent_pipeline and the forwarded
// variables; the parent's next stage waits for the depend child, then runs; the bridges
// list shows both children, and each child names its parent and has its user.
func TestChildPipelineWithDepend(t *testing.T) {
	t.Parallel()
	bare, sha := triggerRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "mono", "repo_url": "file://" + bare}, &project)
	parent := inst.CreateYAML(t, project.ID, sha, parentCI)
	r := inst.NewRunner(t)
	r.Finish(t, r.TakeNamed(t, "build"), "success", "")
	if n := bridgePass(t, inst); n != 2 {
		t.Fatalf("bridge pass moved %d bridges, want 2", n)
	}
	list := bridges(t, inst, project.ID, parent.ID)
	apiB, web := bridgeNamed(t, list, "api"), bridgeNamed(t, list, "web")
	if apiB.Status != "running" || apiB.DownstreamPipeline == nil || apiB.DownstreamPipeline.Source != "parent_pipeline" {
		t.Fatalf("api bridge %+v, want running with a parent_pipeline child", apiB)
	}
	if web.Status != "success" || web.DownstreamPipeline == nil {
		t.Fatalf("web bridge %+v, want success (no strategy) with a child", web)
	}
	child := getPipeline(t, inst, project.ID, apiB.DownstreamPipeline.ID)
	if child.ParentPipelineID == nil || *child.ParentPipelineID != parent.ID || child.ParentJobID == nil || *child.ParentJobID != apiB.ID ||
		child.Source != "parent_pipeline" || child.Sha != sha {
		t.Errorf("child %+v: want parent %d, bridge %d, source parent_pipeline, sha %s", child, parent.ID, apiB.ID, sha)
	}
	// The admin token created the parent; its child has the parent's user, as GitLab's.
	if child.User == nil || child.User.ID != 1 || child.User.Username != "admin" {
		t.Errorf("child's user %+v, want the parent's (admin, id 1)", child.User)
	}
	// The parent's jobs list leaves bridges to …/bridges, as GitLab's does.
	var jobs []api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/jobs", project.ID, parent.ID), nil, &jobs)
	for _, j := range jobs {
		if j.Name == "api" || j.Name == "web" {
			t.Errorf("bridge %s listed among jobs", j.Name)
		}
	}

	// The child's jobs run on the runner; deploy waits for the depend child.
	taken := r.TakeAll(t, 2) // api-build and web-build (the two children's first stages)
	if taken["api-build"] == nil || taken["web-build"] == nil {
		t.Fatalf("took %v, want api-build and web-build", slices.Collect(mapsKeys(taken)))
	}
	r.Finish(t, taken["web-build"], "success", "")
	r.Finish(t, taken["api-build"], "success", "")
	test := r.TakeNamed(t, "api-test")
	if v, _ := test.Variable("SERVICE"); v != "api" {
		t.Errorf("SERVICE in the child = %q, want api (the bridge's variable, forwarded)", v)
	}
	if v, _ := test.Variable("GLOBAL"); v != "g" {
		t.Errorf("GLOBAL in the child = %q, want g (a global YAML variable, forwarded)", v)
	}
	if v, _ := test.Variable("CI_PIPELINE_SOURCE"); v != "parent_pipeline" {
		t.Errorf("CI_PIPELINE_SOURCE = %q", v)
	}
	r.NoJob(t) // deploy waits for the api child
	if p := getPipeline(t, inst, project.ID, parent.ID); p.Status != "running" {
		t.Errorf("parent %s while its depend child runs", p.Status)
	}
	r.Finish(t, test, "success", "")
	if b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "api"); b.Status != "success" || b.DownstreamPipeline.Status != "success" {
		t.Errorf("api bridge after its child: %+v", b)
	}
	r.Finish(t, r.TakeNamed(t, "deploy"), "success", "")
	if p := getPipeline(t, inst, project.ID, parent.ID); p.Status != "success" {
		t.Errorf("parent %s, want success", p.Status)
	}
}

// TestChildPipelineFailures: a failed child fails its depend bridge and the parent skips
// what follows; an invalid child configuration fails the bridge with
// downstream_pipeline_creation_failed; a grandchild is allowed and a third level fails with
// reached_max_descendant_pipelines_depth; a retried bridge creates a new child; cancelling
// the parent cancels its children.
func TestChildPipelineFailures(t *testing.T) {
	t.Parallel()
	bare, sha := triggerRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "mono", "repo_url": "file://" + bare}, &project)
	r := inst.NewRunner(t)

	// Failure propagates up.
	parent := inst.CreateYAML(t, project.ID, sha, `
stages: [children, deploy]
api:
  stage: children
  trigger: {include: services/api/.gitlab-ci.yml, strategy: depend}
deploy:
  stage: deploy
  script: ./deploy
`)
	bridgePass(t, inst)
	r.Finish(t, r.TakeNamed(t, "api-build"), "failed", "script_failure")
	b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "api")
	if b.Status != "failed" || b.DownstreamPipeline.Status != "failed" {
		t.Errorf("bridge after its child failed: %+v", b)
	}
	p := inst.Pipeline(t, parent)
	if p.Status != "failed" {
		t.Errorf("parent %s, want failed", p.Status)
	}
	for _, j := range p.Jobs {
		if j.Name == "deploy" && j.Status != "skipped" {
			t.Errorf("deploy %s, want skipped", j.Status)
		}
	}
	// A retried bridge makes a new child.
	oldChild := b.DownstreamPipeline.ID
	var retried api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/projects/%d/jobs/%d/retry", project.ID, b.ID), nil, &retried)
	bridgePass(t, inst)
	nb := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "api")
	if nb.ID == b.ID || nb.DownstreamPipeline == nil || nb.DownstreamPipeline.ID == oldChild || nb.Status != "running" {
		t.Fatalf("retried bridge %+v: want a new attempt with a new child", nb)
	}
	// Cancelling the parent cancels the child, and the depend bridge with it.
	inst.MustDo(t, http.StatusOK, "POST", fmt.Sprintf("/api/v4/projects/%d/pipelines/%d/cancel", project.ID, parent.ID), nil, nil)
	if c := getPipeline(t, inst, project.ID, nb.DownstreamPipeline.ID); c.Status != "canceled" {
		t.Errorf("child after its parent's cancel: %s", c.Status)
	}
	if nb := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "api"); nb.Status != "canceled" {
		t.Errorf("bridge after cancel: %s", nb.Status)
	}
	r.NoJob(t)

	// An invalid child configuration, a missing file.
	parent = inst.CreateYAML(t, project.ID, sha, `
broken:
  trigger: {include: broken.yml, strategy: depend}
missing:
  trigger: {include: nope.yml}
`)
	bridgePass(t, inst)
	for _, name := range []string{"broken", "missing"} {
		b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), name)
		if b.Status != "failed" || b.FailureReason == nil || *b.FailureReason != "downstream_pipeline_creation_failed" || b.DownstreamPipeline != nil {
			t.Errorf("%s bridge %+v, want failed with downstream_pipeline_creation_failed and no child", name, b)
		}
	}
	if p := inst.Pipeline(t, parent); p.Status != "failed" {
		t.Errorf("parent of broken children: %s", p.Status)
	}

	// Nesting: parent → child → grandchild is allowed; the grandchild's own bridge fails.
	parent = inst.CreateYAML(t, project.ID, sha, "nest:\n  trigger: {include: nested/child.yml, strategy: depend}\n")
	bridgePass(t, inst) // the child
	bridgePass(t, inst) // the grandchild
	bridgePass(t, inst) // the third level: refused
	child := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "nest").DownstreamPipeline
	grand := bridgeNamed(t, bridges(t, inst, project.ID, child.ID), "grandchild").DownstreamPipeline
	if grand == nil {
		t.Fatal("no grandchild")
	}
	deeper := bridgeNamed(t, bridges(t, inst, project.ID, grand.ID), "deeper")
	if deeper.Status != "failed" || deeper.FailureReason == nil || *deeper.FailureReason != "reached_max_descendant_pipelines_depth" {
		t.Errorf("third-level bridge %+v, want failed with reached_max_descendant_pipelines_depth", deeper)
	}
	// The grandchild failed (its bridge did): the failure climbs to the top.
	r.Finish(t, r.TakeNamed(t, "leaf"), "success", "")
	for _, id := range []int64{grand.ID, child.ID, parent.ID} {
		if p := getPipeline(t, inst, project.ID, id); p.Status != "failed" {
			t.Errorf("pipeline %d: %s, want failed", id, p.Status)
		}
	}
}

// TestBridgeRaceAcrossReplicas: bridge passes on two replicas, racing over the same pending
// bridges, create exactly one child per bridge.
func TestBridgeRaceAcrossReplicas(t *testing.T) {
	t.Parallel()
	bare, sha := triggerRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	other := inst.Replica(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "mono", "repo_url": "file://" + bare}, &project)
	var ci strings.Builder
	const n = 6
	for i := range n {
		fmt.Fprintf(&ci, "svc%d:\n  trigger: {include: services/web/ci.yml, strategy: depend}\n", i)
	}
	var parents []api.Pipeline
	for range 3 {
		parents = append(parents, inst.CreateYAML(t, project.ID, sha, ci.String()))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	moved := 0
	for _, rep := range []*jobapitest.Instance{inst, other, inst, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := rep.Server.Bridges.CreateOnce(context.Background())
			if err != nil {
				t.Errorf("bridge pass: %v", err)
			}
			mu.Lock()
			moved += k
			mu.Unlock()
		}()
	}
	wg.Wait()
	if moved != 3*n {
		t.Errorf("passes moved %d bridges in all, want %d (each once)", moved, 3*n)
	}
	seen := map[int64]bool{}
	for _, p := range parents {
		for _, b := range bridges(t, inst, project.ID, p.ID) {
			if b.DownstreamPipeline == nil || b.Status != "running" {
				t.Errorf("bridge %d: %+v", b.ID, b)
				continue
			}
			if seen[b.DownstreamPipeline.ID] {
				t.Errorf("child %d shared", b.DownstreamPipeline.ID)
			}
			seen[b.DownstreamPipeline.ID] = true
		}
	}
	var children int
	if err := inst.Server.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pipelines WHERE parent_build_id IS NOT NULL`).Scan(&children); err != nil {
		t.Fatal(err)
	}
	if children != 3*n {
		t.Errorf("%d child pipelines stored, want %d", children, 3*n)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
