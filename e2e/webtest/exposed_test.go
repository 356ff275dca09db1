package webtest

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// The pipeline page lists the archives its jobs expose (artifacts:expose_as) by their
// labels, each a link to the archive; an archive of artifacts:access: none is listed
// without a link, the job page shows it without one too, and its download is a 403 page.
func TestPagesShowExposedArtifacts(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	runner := inst.NewRunner(t)
	resp, body := inst.Do(t, "POST", "/api/v4/projects/7/pipeline?ref=main", `
coverage:
  script: make coverage
  artifacts: {paths: [coverage/index.html], expose_as: Coverage report}
hidden:
  script: make secret
  artifacts: {paths: [secret.txt], access: none, expose_as: Secret}
plain:
  script: make
`, "Content-Type", "application/yaml")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var p api.Pipeline
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("coverage/index.html")
	_, _ = io.WriteString(w, "<h1>93%</h1>")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, name := range []string{"coverage", "hidden"} {
		job := runner.TakeNamed(t, name)
		ids[name] = job.ID
		res, err := runner.UploadArtifacts(context.Background(), job,
			func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
			runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip, Type: "archive"})
		if err != nil || res.Code != http.StatusCreated {
			t.Fatalf("%s upload: %d %v", name, res.Code, err)
		}
	}

	b := newBrowser(t, inst.URL)
	b.signIn(jobapitest.AdminToken)
	page := b.get(fmt.Sprintf("/projects/7/pipelines/%d", p.ID), http.StatusOK)
	for _, want := range []string{`aria-label="Exposed artifacts"`, fmt.Sprintf(`<a href="/projects/7/jobs/%d/artifacts/`, ids["coverage"]),
		`download>Coverage report</a>`, "Secret <span class=\"muted\">(artifacts:access: none)</span>"} {
		if !strings.Contains(page, want) {
			t.Errorf("pipeline page lacks %q", want)
		}
	}
	if strings.Contains(page, fmt.Sprintf(`href="/projects/7/jobs/%d/artifacts/`, ids["hidden"])) {
		t.Error("the pipeline page links the archive of artifacts:access: none")
	}
	job := b.get(fmt.Sprintf("/projects/7/jobs/%d", ids["hidden"]), http.StatusOK)
	if !strings.Contains(job, `<strong class="exposed">Secret</strong>`) || !strings.Contains(job, "runners only") ||
		strings.Contains(job, fmt.Sprintf(`href="/projects/7/jobs/%d/artifacts/`, ids["hidden"])) {
		t.Error("the job page of access: none shows a download link, or not its label")
	}
	// Even a hand-made link to it is refused (artifact ids are the table's: try the few
	// this instance has).
	refused := 0
	for aid := int64(1); aid <= 2; aid++ {
		resp, _ := b.do("GET", fmt.Sprintf("/projects/7/jobs/%d/artifacts/%d", ids["hidden"], aid), nil)
		switch resp.StatusCode {
		case http.StatusOK:
			t.Errorf("the web UI served artifact %d of access: none", aid)
		case http.StatusForbidden:
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d downloads of the access: none archive refused with 403, want 1", refused)
	}
}
