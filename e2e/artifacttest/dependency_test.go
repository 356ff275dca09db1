package artifacttest_test

import (
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// A build → test pipeline passes a 50 MB archive: the build job uploads it as gitlab-runner
// does (multipart, chunked, JOB-TOKEN), the test job of the next stage downloads it with
// its own token, and the bytes are the same. A running job of another pipeline, a job that
// finished, and a wrong token are refused with 403; a job without an archive, or none at
// all, is a 404. On disk and on S3.
func TestDependencyDownload(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			inst := jobapitest.Start(t, jobapitest.Options{Configure: b.configure(t)})
			r := inst.NewRunner(t)
			other := inst.NewRunner(t, "other")
			inst.CreatePipeline(t, 1, []string{"build", "test"},
				jobapitest.Job{"name": "compile", "stage": "build", "script": "make"},
				jobapitest.Job{"name": "lint", "stage": "build", "script": "make lint"},
				jobapitest.Job{"name": "unit", "stage": "test", "script": "make test"})
			inst.CreatePipeline(t, 1, []string{"test"},
				jobapitest.Job{"name": "elsewhere", "stage": "test", "script": "true", "tags": []string{"other"}})

			compile := r.TakeNamed(t, "compile")
			lint := r.TakeNamed(t, "lint")
			zip := makeZip(t, 50<<20)
			start := time.Now()
			res := upload(t, r, compile, zip.content(), runnerclient.ArtifactsOptions{BaseName: "artifacts.zip",
				Format: "zip", Type: "archive", ExpireIn: "1 week"})
			wantUpload(t, "upload of 50 MB", res, http.StatusCreated, runnerclient.UploadSucceeded)
			took := time.Since(start)

			d := inst.Job(t, 1, compile.ID)
			if d.ArtifactsFile == nil || d.ArtifactsFile.Size != zip.size || d.ArtifactsFile.Filename != "artifacts.zip" ||
				len(d.Artifacts) != 1 || d.Artifacts[0].SHA256 != hex.EncodeToString(zip.sum[:]) {
				t.Fatalf("job view after the upload: file %+v, artifacts %+v; want %d bytes of sha256 %x",
					d.ArtifactsFile, d.Artifacts, zip.size, zip.sum)
			}
			if d.ArtifactsExpireAt == nil || d.ArtifactsExpireAt.Sub(time.Now().Add(7*24*time.Hour)).Abs() > time.Minute {
				t.Errorf("expire_in=1 week: artifacts_expire_at %v", d.ArtifactsExpireAt)
			}
			r.Finish(t, compile, runnerclient.StateSuccess, "")
			r.Finish(t, lint, runnerclient.StateSuccess, "")
			unit := r.TakeNamed(t, "unit")
			elsewhere := other.TakeNamed(t, "elsewhere")

			// The dependency's token is the dependent job's own, as GitLab sends it.
			start = time.Now()
			got, sum := download(t, r, runnerclient.Dependency{ID: compile.ID, Token: unit.Token, Name: "compile"})
			wantDownload(t, "unit downloads compile's archive", got, http.StatusOK, runnerclient.DownloadSucceeded)
			if got.Bytes != zip.size || sum != zip.sum {
				t.Fatalf("downloaded %d bytes (sha256 %x), uploaded %d (%x)", got.Bytes, sum, zip.size, zip.sum)
			}
			t.Logf("%s: 50 MB archive uploaded in %v, downloaded in %v", b.name, took.Round(time.Millisecond),
				time.Since(start).Round(time.Millisecond))

			res2, _ := download(t, r, runnerclient.Dependency{ID: compile.ID, Token: elsewhere.Token})
			wantDownload(t, "a running job of another pipeline", res2, http.StatusForbidden, runnerclient.DownloadForbidden)
			res2, _ = download(t, r, runnerclient.Dependency{ID: compile.ID, Token: compile.Token})
			wantDownload(t, "the finished job's own token", res2, http.StatusForbidden, runnerclient.DownloadForbidden)
			res2, _ = download(t, r, runnerclient.Dependency{ID: compile.ID, Token: "glcbt-not-a-token-at-all-0123456789"})
			wantDownload(t, "an unknown token", res2, http.StatusForbidden, runnerclient.DownloadForbidden)
			res2, _ = download(t, r, runnerclient.Dependency{ID: lint.ID, Token: unit.Token})
			wantDownload(t, "a dependency without an archive", res2, http.StatusNotFound, runnerclient.DownloadNotFound)
			res2, _ = download(t, r, runnerclient.Dependency{ID: 1 << 40, Token: unit.Token})
			wantDownload(t, "a job that does not exist", res2, http.StatusNotFound, runnerclient.DownloadNotFound)
			res2, _ = download(t, r, runnerclient.Dependency{ID: unit.ID, Token: unit.Token})
			wantDownload(t, "a job downloading its own", res2, http.StatusForbidden, runnerclient.DownloadForbidden)

			// The other pipeline's job can upload its own, and its token still cannot read ours.
			small := makeZip(t, 1000)
			wantUpload(t, "elsewhere uploads", upload(t, other, elsewhere, small.content(), zipArchive),
				http.StatusCreated, runnerclient.UploadSucceeded)
			res2, _ = download(t, r, runnerclient.Dependency{ID: elsewhere.ID, Token: unit.Token})
			wantDownload(t, "unit reads another pipeline's archive", res2, http.StatusForbidden, runnerclient.DownloadForbidden)
			r.Finish(t, unit, runnerclient.StateSuccess, "")

			// After the job ends its token opens nothing.
			res2, _ = download(t, r, runnerclient.Dependency{ID: compile.ID, Token: unit.Token})
			wantDownload(t, "the dependent job after it finished", res2, http.StatusForbidden, runnerclient.DownloadForbidden)
		})
	}
}
