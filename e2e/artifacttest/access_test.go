package artifacttest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

const accessYAML = `
stages: [build, test]
secret:
  stage: build
  script: make
  artifacts:
    paths: [build/]
    access: none
private:
  stage: build
  script: make
  artifacts:
    paths: [build/VERSION]
    public: false
    expose_as: version file
use:
  stage: test
  script: make test
`

// TestArtifactsAccess: artifacts:access and artifacts:public of .gitlab-ci.yml are stored
// with the uploaded artifact and shown by the job API with expose_as. access: none refuses
// the operator's downloads (the archive and a file of it) with a 403 JSON message, while the
// runner of the job that depends on it still downloads the archive, as in GitLab;
// public: false (developer) leaves the operator, a maintainer, free to download.
func TestArtifactsAccess(t *testing.T) {
	t.Parallel()
	inst := start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	inst.CreateYAML(t, 1, "", accessYAML)
	secret, private := r.TakeNamed(t, "secret"), r.TakeNamed(t, "private")
	zip := makeZip(t, 1000)
	wantUpload(t, "secret uploads", upload(t, r, secret, zip.Content(), zipArchive), http.StatusCreated, runnerclient.UploadSucceeded)
	wantUpload(t, "private uploads", upload(t, r, private, zip.Content(), zipArchive), http.StatusCreated, runnerclient.UploadSucceeded)

	if s := inst.Job(t, 1, secret.ID); len(s.Artifacts) != 1 || s.Artifacts[0].Access != "none" || s.Artifacts[0].ExposeAs != "" {
		t.Errorf("secret's artifacts %+v, want access none", s.Artifacts)
	}
	if p := inst.Job(t, 1, private.ID); len(p.Artifacts) != 1 || p.Artifacts[0].Access != "developer" || p.Artifacts[0].ExposeAs != "version file" {
		t.Errorf("private's artifacts %+v, want access developer, expose_as \"version file\"", p.Artifacts)
	}

	for _, path := range []string{"/artifacts", "/artifacts/build/VERSION"} {
		resp, b := inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d%s", secret.ID, path), nil)
		var msg struct{ Message string }
		if resp.StatusCode != http.StatusForbidden || json.Unmarshal(b, &msg) != nil || !strings.Contains(msg.Message, "artifacts:access is none") {
			t.Errorf("GET secret %s: %d %s; want 403 naming artifacts:access", path, resp.StatusCode, b)
		}
		resp, b = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d%s", private.ID, path), nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET private %s: %d %s", path, resp.StatusCode, b)
		}
		if path != "/artifacts" && string(b) != "1.2.3\n" {
			t.Errorf("private's build/VERSION: %q", b)
		}
	}

	r.Finish(t, secret, runnerclient.StateSuccess, "")
	r.Finish(t, private, runnerclient.StateSuccess, "")
	use := r.TakeNamed(t, "use")
	got, sum := download(t, r, dependency(t, use, "secret"))
	wantDownload(t, "use downloads secret's archive", got, http.StatusOK, runnerclient.DownloadSucceeded)
	if sum != zip.Sum {
		t.Error("the dependency download gave other bytes")
	}
	f, err := os.Open(zip.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, _ := io.Copy(io.Discard, f); n != got.Bytes {
		t.Errorf("downloaded %d bytes, the archive has %d", got.Bytes, n)
	}
}
