package sourcetest_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/downstream"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// dynamicRepo holds what a generated child configuration includes from the repository.
func dynamicRepo(t *testing.T) (bare, sha string) {
	t.Helper()
	m := newMonorepo(t)
	return m.Bare, m.Commit(map[string]string{"ci/common.yml": "dyn-lint:\n  stage: test\n  script: echo lint\n"})
}

// zipOf is a zip archive of files, as gitlab-runner uploads a job's artifacts:paths.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, text := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, text); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// uploadArchive sends archive as the job's artifacts archive, as gitlab-runner does.
func uploadArchive(t *testing.T, r *jobapitest.Runner, job *runnerclient.Job, archive []byte) {
	t.Helper()
	res, err := r.UploadArtifacts(context.Background(), job,
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(archive)), nil },
		runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip, Type: runnerclient.ArtifactTypeArchive})
	if err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload the archive of %s: %d %s %v", job.JobInfo.Name, res.Code, res.Message, err)
	}
}

// startOn starts a replica whose object store is a directory, or an S3 server (returned).
func startOn(t *testing.T, backend string) (*jobapitest.Instance, *testenv.S3Server) {
	t.Helper()
	if backend == "dir" {
		return jobapitest.Start(t, jobapitest.Options{}), nil
	}
	s3 := testenv.S3(t)
	return jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) {
		c.ObjectStore = s3.URL()
		c.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey}
	}}), s3
}

const generatedChild = `
stages: [build, test]
include:
  - local: ci/common.yml
dyn-build:
  stage: build
  script: echo "built for $CI_PIPELINE_SOURCE"
`

// TestDynamicChildPipeline: a job generates a child's configuration, the runner uploads it
// in the job's artifacts archive, the bridge reads it out of the archive (on a directory
// store and on S3) with the child file's own local include from the repository, and the
// child's jobs are handed out and run; the depend bridge and the parent end with them.
func TestDynamicChildPipeline(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"dir", "s3"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			bare, sha := dynamicRepo(t)
			inst, _ := startOn(t, backend)
			var project api.Project
			inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "dyn", "repo_url": "file://" + bare}, &project)
			parent := inst.CreateYAML(t, project.ID, sha, `
stages: [generate, children]
generate:
  stage: generate
  script: ./gen > gen/child.yml
  artifacts: {paths: [gen/]}
child:
  stage: children
  needs: [generate]
  trigger:
    include:
      - artifact: gen/child.yml
        job: generate
    strategy: depend
`)
			r := inst.NewRunner(t)
			gen := r.TakeNamed(t, "generate")
			uploadArchive(t, r, gen, zipOf(t, map[string]string{"gen/child.yml": generatedChild, "gen/other.txt": "x"}))
			r.Finish(t, gen, "success", "")
			if n := bridgePass(t, inst); n != 1 {
				t.Fatalf("bridge pass moved %d bridges, want 1", n)
			}
			b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child")
			if b.Status != "running" || b.DownstreamPipeline == nil {
				t.Fatalf("bridge %+v, want running with a child", b)
			}
			build := r.TakeNamed(t, "dyn-build")
			if v, _ := build.Variable("CI_PIPELINE_SOURCE"); v != "parent_pipeline" {
				t.Errorf("CI_PIPELINE_SOURCE in the child = %q", v)
			}
			r.Finish(t, build, "success", "")
			r.Finish(t, r.TakeNamed(t, "dyn-lint"), "success", "")
			if b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child"); b.Status != "success" || b.DownstreamPipeline.Status != "success" {
				t.Errorf("bridge after its child: %+v", b)
			}
			if p := getPipeline(t, inst, project.ID, parent.ID); p.Status != "success" {
				t.Errorf("parent %s, want success", p.Status)
			}
		})
	}
}

// TestDynamicChildPipelineFailures: what the user can get wrong fails the bridge with
// downstream_pipeline_creation_failed and GitLab's message in its downstream_failed event:
// a job without an archive, a file the archive lacks, a file that is no valid
// configuration, one over 1 MiB.
func TestDynamicChildPipelineFailures(t *testing.T) {
	t.Parallel()
	bare, sha := dynamicRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "dynf", "repo_url": "file://" + bare}, &project)
	parent := inst.CreateYAML(t, project.ID, sha, `
stages: [generate, children]
generate: {stage: generate, script: ./gen}
bare: {stage: generate, script: "true"}
nofile: {stage: children, trigger: {include: [{artifact: nope.yml, job: generate}]}}
badyaml: {stage: children, trigger: {include: [{artifact: bad.yml, job: generate}]}}
big: {stage: children, trigger: {include: [{artifact: big.yml, job: generate}]}}
noarchive: {stage: children, trigger: {include: [{artifact: c.yml, job: bare}]}}
`)
	r := inst.NewRunner(t)
	jobs := r.TakeAll(t, 2)
	uploadArchive(t, r, jobs["generate"], zipOf(t, map[string]string{
		"bad.yml": "job:\n  script: [[[\n",
		"big.yml": "x: {script: y}\n#" + strings.Repeat("x", 1<<20),
	}))
	r.Finish(t, jobs["generate"], "success", "")
	r.Finish(t, jobs["bare"], "success", "")
	if n := bridgePass(t, inst); n != 4 {
		t.Fatalf("bridge pass moved %d bridges, want 4", n)
	}
	list := bridges(t, inst, project.ID, parent.ID)
	for name, want := range map[string]string{
		"nofile":    "Path `nope.yml` does not exist inside the `generate` artifacts archive!",
		"badyaml":   "`bad.yml`:",
		"big":       "larger than 1048576 bytes",
		"noarchive": "Job `bare` not found in parent pipeline or does not have artifacts!",
	} {
		b := bridgeNamed(t, list, name)
		if b.Status != "failed" || b.FailureReason == nil || *b.FailureReason != "downstream_pipeline_creation_failed" || b.DownstreamPipeline != nil {
			t.Errorf("%s: bridge %+v, want failed with downstream_pipeline_creation_failed", name, b)
			continue
		}
		ev := jobapitest.EventsOf(inst.Events(t, project.ID, b.ID), "downstream_failed")
		if len(ev) != 1 || !strings.Contains(fmt.Sprint(ev[0].Detail["message"]), want) {
			t.Errorf("%s: downstream_failed events %+v, want one whose message has %q", name, ev, want)
		}
	}
}

// TestDynamicChildPipelineStoreDown: with the object store unreachable the bridge cannot
// read the archive; it stays pending (no failure recorded) and the pass reports the error;
// once the store is back, the next pass creates the child.
func TestDynamicChildPipelineStoreDown(t *testing.T) {
	t.Parallel()
	bare, sha := dynamicRepo(t)
	inst, s3 := startOn(t, "s3")
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "dyns", "repo_url": "file://" + bare}, &project)
	parent := inst.CreateYAML(t, project.ID, sha, `
stages: [generate, children]
generate: {stage: generate, script: ./gen}
child: {stage: children, trigger: {include: [{artifact: child.yml, job: generate}]}}
`)
	r := inst.NewRunner(t)
	gen := r.TakeNamed(t, "generate")
	uploadArchive(t, r, gen, zipOf(t, map[string]string{"child.yml": generatedChild}))
	r.Finish(t, gen, "success", "")

	s3.Proxy.Stop()
	n, err := inst.Server.Bridges.CreateOnce(context.Background())
	if err == nil || n != 0 {
		t.Fatalf("bridge pass with the store down: %d, %v; want nothing moved and an error", n, err)
	}
	b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child")
	if b.Status != "pending" || len(jobapitest.EventsOf(inst.Events(t, project.ID, b.ID), "downstream_failed")) != 0 {
		t.Fatalf("bridge with the store down: %+v, want pending without a failure", b)
	}
	s3.Proxy.Start()
	if n := bridgePass(t, inst); n != 1 {
		t.Fatalf("bridge pass with the store back moved %d, want 1", n)
	}
	if b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child"); b.Status != "success" || b.DownstreamPipeline == nil {
		t.Fatalf("bridge once the store is back: %+v, want success with a child", b)
	}
	r.Finish(t, r.TakeNamed(t, "dyn-build"), "success", "")
}

// TestBridgeWaitsOutAnUnreachableRepository: a child whose configuration lives in a
// repository that cannot be fetched is not the user's mistake at once (git down): the
// bridge stays pending while the pass reports the error, and fails with the fetch's
// message only once it has waited downstream.MaxSourceWait.
func TestBridgeWaitsOutAnUnreachableRepository(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	inst := jobapitest.Start(t, jobapitest.Options{Now: now})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "gone", "repo_url": "http://127.0.0.1:1/app.git"}, &project)
	parent := inst.CreateYAML(t, project.ID, strings.Repeat("a", 40), "child:\n  trigger: {include: ci/child.yml}\n")
	if n, err := inst.Server.Bridges.CreateOnce(context.Background()); err == nil || n != 0 {
		t.Fatalf("bridge pass with git unreachable: %d, %v; want nothing moved and an error", n, err)
	}
	if b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child"); b.Status != "pending" {
		t.Fatalf("bridge with git unreachable: %s, want pending", b.Status)
	}
	offset.Store(int64(downstream.MaxSourceWait + time.Minute))
	if n := bridgePass(t, inst); n != 1 {
		t.Fatalf("bridge pass past MaxSourceWait moved %d, want 1", n)
	}
	b := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child")
	ev := jobapitest.EventsOf(inst.Events(t, project.ID, b.ID), "downstream_failed")
	if b.Status != "failed" || len(ev) != 1 || !strings.Contains(fmt.Sprint(ev[0].Detail["message"]), "could not be fetched") {
		t.Errorf("bridge past MaxSourceWait: %+v, events %+v; want failed with the fetch's message", b, ev)
	}
}
