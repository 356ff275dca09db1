package storefaulttest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

const childConfig = `
stages: [build]
dyn-build:
  stage: build
  script: echo "built for $CI_PIPELINE_SOURCE"
`

// TestStoreRestartedMidChildConfigRead: a dynamic child pipeline (trigger:include:artifact)
// whose configuration is read out of the generating job's 8 MB archive (its central
// directory, then the file: ranged reads) while the store crashes and restarts, every
// answer of the store slowed to a second so that the crash lands during the pass's reads.
// Either the pass fails (the error names the store and the job; a store outage is not the
// user's mistake: the bridge stays pending, not failed) and the next pass, with the store
// back, creates the child; or the read resumed across the restart and the pass created it.
// Either way the child is created once and its job is handed out.
func TestStoreRestartedMidChildConfigRead(t *testing.T) {
	t.Parallel()
	srv := testenv.OwnS3(t)
	inst := start(t, srv, srv.Proxy.URL(srv.Endpoint), jobapitest.Options{})
	r := inst.NewRunner(t)
	parent := inst.CreateYAML(t, 1, "", `
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
	gen := r.TakeNamed(t, "generate")
	zip := jobapitest.MakeZip(t, 8<<20, map[string]string{"gen/child.yml": childConfig})
	if res, err := r.UploadArtifacts(context.Background(), gen, zip.Content(), zipArchive); err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload: %d %v", res.Code, err)
	}
	r.Finish(t, gen, runnerclient.StateSuccess, "")

	srv.Proxy.SetLatency(time.Second)
	type pass struct {
		moved int
		err   error
	}
	done := make(chan pass, 1)
	passBegan := time.Now()
	go func() {
		n, err := inst.Bridges.CreateOnce(context.Background())
		done <- pass{n, err}
	}()
	time.Sleep(300 * time.Millisecond) // the pass's Postgres reads are done; its first store read is on its way
	downFor := crashRestart(t, srv, time.Second)
	first := <-done
	srv.Proxy.SetLatency(0)
	t.Logf("store crashed and restarted during the bridge pass (no answer for %v): the pass took %v, moved %d, %v",
		downFor.Round(time.Millisecond), time.Since(passBegan).Round(time.Millisecond), first.moved, first.err)
	if first.err == nil {
		// The store went while a read's stream was open: the read resumed once it was back.
		if first.moved != 1 {
			t.Fatalf("the pass across the store's restart: moved %d, no error; want 1", first.moved)
		}
	} else {
		if !errors.Is(first.err, builds.ErrUnavailable) || !strings.Contains(first.err.Error(), "archive of job") {
			t.Errorf("the failed pass's error: %v; want the store unavailable, naming the archive's job", first.err)
		}
		b := bridge(t, inst, parent.ID, "child")
		if b.Status != "pending" || b.DownstreamPipeline != nil {
			t.Fatalf("bridge after the failed read: %s (child %v), want pending without a child", b.Status, b.DownstreamPipeline)
		}
		began := time.Now()
		n, err := inst.Bridges.CreateOnce(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("bridge pass with the store back: moved %d, %v; want 1", n, err)
		}
		t.Logf("the next pass, the store back, created the child in %v", time.Since(began).Round(time.Millisecond))
	}
	b := bridge(t, inst, parent.ID, "child")
	if b.Status != "running" || b.DownstreamPipeline == nil {
		t.Fatalf("bridge after the pass: %s (child %v), want running with its child", b.Status, b.DownstreamPipeline)
	}
	if n, err := inst.Bridges.CreateOnce(context.Background()); err != nil || n != 0 {
		t.Errorf("a further pass: moved %d, %v; want nothing to do", n, err)
	}
	if children := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines WHERE project_id = 1 AND id <> $1", parent.ID); children != 1 {
		t.Errorf("%d child pipelines, want 1", children)
	}
	build := r.TakeNamed(t, "dyn-build")
	r.Finish(t, build, runnerclient.StateSuccess, "")
}

func bridge(t *testing.T, inst *jobapitest.Instance, pipelineID int64, name string) api.Bridge {
	t.Helper()
	var list []api.Bridge
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d/bridges", pipelineID), nil, &list)
	for _, b := range list {
		if b.Name == name && b.RetriedBy == nil {
			return b
		}
	}
	t.Fatalf("no bridge %q in %+v", name, list)
	return api.Bridge{}
}
