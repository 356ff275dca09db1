package artifacttest_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// The operator's calls (GitLab's job artifacts API): the archive whole, in ranges and
// conditionally; one file out of it; and delete, after which the object leaves the store.
func TestOperatorArtifacts(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			inst := start(t, jobapitest.Options{Configure: b.configure(t)})
			r := inst.NewRunner(t)
			inst.CreatePipeline(t, 3, []string{"build"}, jobapitest.Job{"name": "a", "stage": "build", "script": "make"},
				jobapitest.Job{"name": "none", "stage": "build", "script": "make"})
			job := r.TakeNamed(t, "a")
			none := r.TakeNamed(t, "none")
			zip := makeZip(t, 3<<20)
			wantUpload(t, "archive", upload(t, r, job, zip.Content(), zipArchive), 201, runnerclient.UploadSucceeded)
			whole, err := os.ReadFile(zip.Path)
			if err != nil {
				t.Fatal(err)
			}
			base := fmt.Sprintf("/api/v4/projects/3/jobs/%d/artifacts", job.ID)

			resp, body := inst.Do(t, "GET", base, nil)
			jobapitest.WantStatus(t, resp, body, http.StatusOK)
			if !bytes.Equal(body, whole) || resp.Header.Get("Content-Type") != "application/zip" ||
				!strings.Contains(resp.Header.Get("Content-Disposition"), `filename=artifacts.zip`) {
				t.Fatalf("archive: %d bytes, %s, %s", len(body), resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"))
			}
			etag := resp.Header.Get("ETag")
			if etag != `"`+hex.EncodeToString(zip.Sum[:])+`"` {
				t.Errorf("ETag %s, want the SHA-256", etag)
			}
			resp, body = inst.Do(t, "GET", base, nil, "Range", "bytes=1000-1999")
			jobapitest.WantStatus(t, resp, body, http.StatusPartialContent)
			if !bytes.Equal(body, whole[1000:2000]) {
				t.Error("range 1000-1999 differs from the archive's bytes")
			}
			resp, body = inst.Do(t, "GET", base, nil, "Range", fmt.Sprintf("bytes=%d-", len(whole)-10))
			jobapitest.WantStatus(t, resp, body, http.StatusPartialContent)
			if !bytes.Equal(body, whole[len(whole)-10:]) {
				t.Error("the last 10 bytes differ")
			}
			resp, body = inst.Do(t, "GET", base, nil, "If-None-Match", etag)
			jobapitest.WantStatus(t, resp, body, http.StatusNotModified)

			resp, body = inst.Do(t, "GET", base+"/build/VERSION", nil)
			jobapitest.WantStatus(t, resp, body, http.StatusOK)
			if string(body) != "1.2.3\n" {
				t.Errorf("build/VERSION from the archive: %q", body)
			}
			resp, body = inst.Do(t, "GET", base+"/build/app.bin", nil)
			jobapitest.WantStatus(t, resp, body, http.StatusOK)
			if len(body) != 3<<20 {
				t.Errorf("build/app.bin: %d bytes, want %d", len(body), 3<<20)
			}
			for path, code := range map[string]int{
				base + "/build/missing":       404,
				base + "/build":               404,
				base + "/../../../etc/passwd": 404,
				fmt.Sprintf("/api/v4/projects/3/jobs/%d/artifacts", none.ID): 404, // no archive
				fmt.Sprintf("/api/v4/projects/4/jobs/%d/artifacts", job.ID):  404, // another project
			} {
				resp, body := inst.Do(t, "GET", path, nil)
				jobapitest.WantJSONError(t, resp, body, code)
			}

			resp, body = inst.Do(t, "DELETE", base, nil)
			jobapitest.WantStatus(t, resp, body, http.StatusNoContent)
			resp, body = inst.Do(t, "GET", base, nil)
			jobapitest.WantJSONError(t, resp, body, http.StatusNotFound)
			if d := inst.Job(t, 3, job.ID); len(d.Artifacts) != 0 || d.ArtifactsFile != nil {
				t.Errorf("job view after delete: %+v %+v", d.Artifacts, d.ArtifactsFile)
			}
			if n, cleanup := counts(t, inst); n != 0 || cleanup != 0 {
				t.Errorf("after delete: %d artifacts, %d objects listed for cleanup; want none (deleted at once)", n, cleanup)
			}
			if objs := objects(t, inst); len(objs) != 0 {
				t.Errorf("objects left after delete: %v", objs)
			}
			var events []map[string]any
			inst.MustDo(t, 200, "GET", "/api/v4/admin/events", nil, &events)
			if !strings.Contains(fmt.Sprint(events), "job_artifacts_deleted") {
				t.Errorf("no audit event for the delete: %v", events)
			}
			// The job may upload again (GitLab erases and lets a retry upload anew).
			wantUpload(t, "upload after delete", upload(t, r, job, zip.Content(), zipArchive), 201, runnerclient.UploadSucceeded)
		})
	}
}

// Artifacts expire after expire_in, by the artifacts pass on any replica, except those of
// the latest successful pipeline of a ref, which GitLab keeps until a newer pipeline of the
// ref succeeds. never never expires.
func TestExpiry(t *testing.T) {
	t.Parallel()
	var ahead atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	inst := start(t, jobapitest.Options{Now: now})
	other := inst.Replica(t, jobapitest.Options{Now: now})
	r := inst.NewRunner(t)

	// run creates a one-job pipeline on ref, uploads an archive (and a report kept for
	// ever), and finishes it as state.
	run := func(ref, state, expireIn string) *runnerclient.Job {
		t.Helper()
		inst.MustDo(t, 201, "POST", "/api/v4/projects/1/pipeline", map[string]any{"ref": ref, "stages": []string{"build"},
			"jobs": []map[string]any{{"name": "a", "stage": "build", "script": "make"}}}, nil)
		job := r.TakeNamed(t, "a")
		wantUpload(t, "archive", upload(t, r, job, makeZip(t, 1000).Content(),
			runnerclient.ArtifactsOptions{BaseName: "a.zip", Format: "zip", Type: "archive", ExpireIn: expireIn}), 201, runnerclient.UploadSucceeded)
		wantUpload(t, "report", upload(t, r, job, runnerclient.BytesContent(gz(t, "<x/>")),
			runnerclient.ArtifactsOptions{BaseName: "j.gz", Format: "gzip", Type: "junit", ExpireIn: "never"}), 201, runnerclient.UploadSucceeded)
		reason := ""
		if state == runnerclient.StateFailed {
			reason = "script_failure"
		}
		r.Finish(t, job, state, reason)
		return job
	}
	stored := func(job *runnerclient.Job) []string {
		var types []string
		for _, a := range inst.Job(t, 1, job.ID).Artifacts {
			types = append(types, a.FileType)
		}
		return types
	}
	main1 := run("main", runnerclient.StateSuccess, "1 hour")
	failed := run("main", runnerclient.StateFailed, "1 hour")
	feature := run("feature", runnerclient.StateSuccess, "1 day")

	pass := func(inst *jobapitest.Instance) {
		t.Helper()
		if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	pass(other) // nothing is due yet
	if n, _ := counts(t, inst); n != 6 {
		t.Fatalf("%d artifacts before anything expired, want 6", n)
	}

	ahead.Store(int64(2 * time.Hour))
	pass(other)
	if got := stored(main1); len(got) != 2 {
		t.Errorf("main's latest successful pipeline lost %v: it keeps its expired archive", got)
	}
	if got := stored(failed); fmt.Sprint(got) != "[junit]" {
		t.Errorf("the failed pipeline's artifacts after expiry: %v, want the never-expiring report only", got)
	}
	if got := stored(feature); len(got) != 2 {
		t.Errorf("feature's artifacts expire in a day, yet: %v", got)
	}

	// A newer successful pipeline on main: the old one's expired archive goes.
	main2 := run("main", runnerclient.StateSuccess, "1 hour")
	pass(inst)
	if got := stored(main1); fmt.Sprint(got) != "[junit]" {
		t.Errorf("main's older pipeline after a newer one succeeded: %v, want [junit]", got)
	}
	if got := stored(main2); len(got) != 2 {
		t.Errorf("main's newest pipeline: %v", got)
	}
	ahead.Store(int64(48 * time.Hour))
	pass(other)
	if got := stored(feature); len(got) != 2 {
		t.Errorf("feature's only successful pipeline keeps its artifacts, yet: %v", got)
	}
	if v := inst.Metric(t, "jobapi_artifacts_expired_total") + other.Metric(t, "jobapi_artifacts_expired_total"); v != 2 {
		t.Errorf("jobapi_artifacts_expired_total = %v across the replicas, want 2", v)
	}
	if objs := objects(t, inst); len(objs) != 6 {
		t.Errorf("objects after expiry: %v, want the 6 artifacts left of 8", objs)
	}
}
