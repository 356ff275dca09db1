package artifacttest_test

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// ciYAML is a build → test pipeline as .gitlab-ci.yml says it: compile's archive goes to
// the next stage by GitLab's default (unit), to a job that needs it (dag), and not to a job
// that names other dependencies (docs). lint declares artifacts but never uploads any.
const ciYAML = `
stages: [build, test]
compile:
  stage: build
  script: make
  artifacts:
    paths: [build/]
    expire_in: 1 week
lint:
  stage: build
  script: make lint
  artifacts:
    paths: [lint.txt]
unit:
  stage: test
  script: make test
dag:
  stage: test
  needs: [compile]
  script: make dag
docs:
  stage: test
  dependencies: [lint]
  script: make docs
`

// otherYAML is a pipeline of another project's shape, run by a runner of its own (tag other).
const otherYAML = `
elsewhere:
  tags: [other]
  script: "true"
  artifacts:
    paths: [x]
`

// dependency returns the payload's entry for the named job.
func dependency(t *testing.T, job *runnerclient.Job, name string) runnerclient.Dependency {
	t.Helper()
	for _, d := range job.Dependencies {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("job %s has no dependency %s: %+v", job.JobInfo.Name, name, job.Dependencies)
	return runnerclient.Dependency{}
}

// downloadable is what gitlab-runner downloads of a job's dependencies: those whose
// artifacts_file names a file (shells/abstract.go jobArtifacts).
func downloadable(job *runnerclient.Job) []string {
	var names []string
	for _, d := range job.Dependencies {
		if d.ArtifactsFile.Filename != "" {
			names = append(names, d.Name)
		}
	}
	return names
}

// A build → test pipeline passes a 50 MB archive: the build job uploads it as gitlab-runner
// does (multipart, chunked, JOB-TOKEN); the test jobs' payloads list it as a dependency
// with its artifacts_file and, as token, the test job's own; the runner downloads it with
// that token and the bytes are the same, by the stage default and through needs. A job
// that depends on other jobs, a running job of another pipeline, a finished job and a
// wrong token are refused with 403; a dependency without an archive is a 404. On disk and
// on S3.
func TestDependencyDownload(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			inst := start(t, jobapitest.Options{Configure: b.configure(t)})
			r := inst.NewRunner(t)
			other := inst.NewRunner(t, "other")
			inst.CreateYAML(t, 1, "", ciYAML)
			inst.CreateYAML(t, 1, "", otherYAML)

			compile := r.TakeNamed(t, "compile")
			lint := r.TakeNamed(t, "lint")
			if len(compile.Artifacts) != 1 || compile.Artifacts[0].ExpireIn != "1 week" {
				t.Fatalf("compile's payload artifacts: %+v", compile.Artifacts)
			}
			zip := makeZip(t, 50<<20)
			start := time.Now()
			res := upload(t, r, compile, zip.Content(), runnerclient.ArtifactsOptions{BaseName: "artifacts.zip",
				Format: "zip", Type: "archive", ExpireIn: compile.Artifacts[0].ExpireIn})
			wantUpload(t, "upload of 50 MB", res, http.StatusCreated, runnerclient.UploadSucceeded)
			took := time.Since(start)

			d := inst.Job(t, 1, compile.ID)
			if d.ArtifactsFile == nil || d.ArtifactsFile.Size != zip.Size || d.ArtifactsFile.Filename != "artifacts.zip" ||
				len(d.Artifacts) != 1 || d.Artifacts[0].SHA256 != hex.EncodeToString(zip.Sum[:]) {
				t.Fatalf("job view after the upload: file %+v, artifacts %+v; want %d bytes of sha256 %x",
					d.ArtifactsFile, d.Artifacts, zip.Size, zip.Sum)
			}
			if d.ArtifactsExpireAt == nil || d.ArtifactsExpireAt.Sub(time.Now().Add(7*24*time.Hour)).Abs() > time.Minute {
				t.Errorf("expire_in=1 week: artifacts_expire_at %v", d.ArtifactsExpireAt)
			}
			r.Finish(t, compile, runnerclient.StateSuccess, "")
			r.Finish(t, lint, runnerclient.StateSuccess, "")
			tests := r.TakeAll(t, 3)
			unit, dag, docs := tests["unit"], tests["dag"], tests["docs"]
			elsewhere := other.TakeNamed(t, "elsewhere")

			// What each payload lists, and what the runner would download of it.
			for job, want := range map[*runnerclient.Job]string{unit: "[compile]", dag: "[compile]", docs: "[]"} {
				if got := fmt.Sprint(downloadable(job)); got != want {
					t.Errorf("%s downloads %s, want %s (dependencies %+v)", job.JobInfo.Name, got, want, job.Dependencies)
				}
			}
			dep := dependency(t, unit, "compile")
			if dep.ID != compile.ID || dep.Token != unit.Token || dep.ArtifactsFile.Size != zip.Size ||
				dep.ArtifactsFile.Filename != "artifacts.zip" {
				t.Errorf("unit's compile dependency %+v, want id %d, unit's own token, artifacts.zip of %d bytes",
					dep, compile.ID, zip.Size)
			}

			start = time.Now()
			got, sum := download(t, r, dep)
			wantDownload(t, "unit downloads compile's archive", got, http.StatusOK, runnerclient.DownloadSucceeded)
			if got.Bytes != zip.Size || sum != zip.Sum {
				t.Fatalf("downloaded %d bytes (sha256 %x), uploaded %d (%x)", got.Bytes, sum, zip.Size, zip.Sum)
			}
			t.Logf("%s: 50 MB archive uploaded in %v, downloaded in %v", b.name, took.Round(time.Millisecond),
				time.Since(start).Round(time.Millisecond))
			got, sum = download(t, r, dependency(t, dag, "compile"))
			wantDownload(t, "dag (needs: compile) downloads it", got, http.StatusOK, runnerclient.DownloadSucceeded)
			if sum != zip.Sum {
				t.Fatal("dag downloaded other bytes")
			}

			for _, c := range []struct {
				what  string
				dep   runnerclient.Dependency
				code  int
				state runnerclient.DownloadState
			}{
				{"a job that depends on lint only", runnerclient.Dependency{ID: compile.ID, Token: docs.Token}, 403, runnerclient.DownloadForbidden},
				{"a running job of another pipeline", runnerclient.Dependency{ID: compile.ID, Token: elsewhere.Token}, 403, runnerclient.DownloadForbidden},
				{"the finished job's own token", runnerclient.Dependency{ID: compile.ID, Token: compile.Token}, 403, runnerclient.DownloadForbidden},
				{"an unknown token", runnerclient.Dependency{ID: compile.ID, Token: "glcbt-not-a-token-at-all-0123456789"}, 403, runnerclient.DownloadForbidden},
				{"a job downloading its own", runnerclient.Dependency{ID: unit.ID, Token: unit.Token}, 403, runnerclient.DownloadForbidden},
				{"a dependency that uploaded nothing", dependency(t, unit, "lint"), 404, runnerclient.DownloadNotFound},
				{"a job that does not exist", runnerclient.Dependency{ID: 1 << 40, Token: unit.Token}, 404, runnerclient.DownloadNotFound},
			} {
				res, _ := download(t, r, c.dep)
				wantDownload(t, c.what, res, c.code, c.state)
			}

			// The other pipeline's job uploads its own; the test jobs' tokens cannot read it.
			small := makeZip(t, 1000)
			wantUpload(t, "elsewhere uploads", upload(t, other, elsewhere, small.Content(), zipArchive),
				http.StatusCreated, runnerclient.UploadSucceeded)
			res2, _ := download(t, r, runnerclient.Dependency{ID: elsewhere.ID, Token: unit.Token})
			wantDownload(t, "unit reads another pipeline's archive", res2, http.StatusForbidden, runnerclient.DownloadForbidden)

			// Once the job ends, its token opens nothing.
			r.Finish(t, unit, runnerclient.StateSuccess, "")
			res2, _ = download(t, r, dep)
			wantDownload(t, "the dependent job after it finished", res2, http.StatusForbidden, runnerclient.DownloadForbidden)
		})
	}
}
