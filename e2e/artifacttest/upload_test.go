package artifacttest_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// Every answer of POST /jobs/:id/artifacts, read as gitlab-runner reads it
// (determineUploadState), and what each leaves stored: a refused upload leaves no artifact
// and, after the artifacts pass, no object.
func TestUploadAnswers(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	inst := start(t, jobapitest.Options{Configure: func(c *server.Config) { c.MaxArtifactSize = limit }})
	r := inst.NewRunner(t)
	p := inst.CreatePipeline(t, 1, []string{"build", "test"},
		jobapitest.Job{"name": "a", "stage": "build", "script": "make"},
		jobapitest.Job{"name": "later", "stage": "test", "script": "make test"})
	job := r.TakeNamed(t, "a")
	pending := &runnerclient.Job{ID: job.ID + 1, Token: "glcbt-" + strings.Repeat("x", 32)}
	small := makeZip(t, 2000)
	smallBytes, err := os.ReadFile(small.Path)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(smallBytes)
	damaged[len(damaged)/2] ^= 0xff

	for _, c := range []struct {
		name    string
		job     *runnerclient.Job
		content []byte
		opts    runnerclient.ArtifactsOptions
		code    int
		state   runnerclient.UploadState
		message string
	}{
		{"wrong token", &runnerclient.Job{ID: job.ID, Token: "glcbt-wrong-wrong-wrong-wrong-wrong"}, smallBytes, zipArchive,
			403, runnerclient.UploadForbidden, "invalid job token"},
		{"job not running", pending, smallBytes, zipArchive, 403, runnerclient.UploadForbidden, "invalid job token"},
		{"format tarzstd", job, smallBytes, runnerclient.ArtifactsOptions{BaseName: "a.tar.zst", Format: "tarzstd", Type: "archive"},
			400, runnerclient.UploadFailed, "artifact_format"},
		{"unknown type", job, smallBytes, runnerclient.ArtifactsOptions{BaseName: "x", Format: "zip", Type: "bogus"},
			400, runnerclient.UploadFailed, "artifact_type"},
		{"archive as gzip", job, gz(t, "x"), runnerclient.ArtifactsOptions{BaseName: "a.gz", Format: "gzip", Type: "archive"},
			400, runnerclient.UploadFailed, "must be a zip"},
		{"bad expire_in", job, smallBytes, runnerclient.ArtifactsOptions{BaseName: "a.zip", Format: "zip", Type: "archive", ExpireIn: "soonish"},
			400, runnerclient.UploadFailed, "expire_in"},
		{"damaged zip", job, damaged, zipArchive, 400, runnerclient.UploadFailed, "damaged"},
		{"truncated zip", job, smallBytes[:len(smallBytes)-30], zipArchive, 400, runnerclient.UploadFailed, "damaged"},
		{"not a zip", job, []byte("<html>hello</html>"), zipArchive, 400, runnerclient.UploadFailed, "not a zip"},
		{"damaged gzip report", job, gz(t, "<testsuite/>")[:20], runnerclient.ArtifactsOptions{BaseName: "junit.xml.gz", Format: "gzip", Type: "junit"},
			400, runnerclient.UploadFailed, "damaged"},
		{"over the size limit", job, bytes.Repeat([]byte("z"), limit+100), runnerclient.ArtifactsOptions{BaseName: "big", Format: "raw", Type: "archive"},
			400, runnerclient.UploadFailed, "must be a zip"},
		{"raw over the size limit", job, bytes.Repeat([]byte("z"), limit+100), runnerclient.ArtifactsOptions{BaseName: "big.txt", Format: "raw", Type: "metrics"},
			413, runnerclient.UploadTooLarge, "maximum size limit"},
	} {
		res := upload(t, r, c.job, runnerclient.BytesContent(c.content), c.opts)
		if res.Code != c.code || res.State != c.state || !strings.Contains(res.Message, c.message) {
			t.Errorf("%s: %d %v %q, want %d %v saying %q", c.name, res.Code, res.State, res.Message, c.code, c.state, c.message)
		}
	}
	if n, _ := counts(t, inst); n != 0 {
		t.Fatalf("%d artifacts stored after refused uploads", n)
	}

	// The archive, a report and raw data; the same archive again is accepted (a runner's
	// retry after a lost answer), other bytes are not.
	wantUpload(t, "archive", upload(t, r, job, small.Content(), zipArchive), 201, runnerclient.UploadSucceeded)
	wantUpload(t, "junit report", upload(t, r, job, runnerclient.BytesContent(gz(t, "<testsuite/>")),
		runnerclient.ArtifactsOptions{BaseName: "junit.xml.gz", Format: "gzip", Type: "junit", ExpireIn: "never"}),
		201, runnerclient.UploadSucceeded)
	wantUpload(t, "dotenv", upload(t, r, job, runnerclient.BytesContent(gz(t, "A=1\n")),
		runnerclient.ArtifactsOptions{BaseName: "build.env.gz", Format: "gzip", Type: "dotenv"}), 201, runnerclient.UploadSucceeded)
	wantUpload(t, "the same archive again", upload(t, r, job, small.Content(), zipArchive), 201, runnerclient.UploadSucceeded)
	other := makeZip(t, 3000)
	res := upload(t, r, job, other.Content(), zipArchive)
	if res.Code != 400 || !strings.Contains(res.Message, "another artifact of the same type already exists") {
		t.Errorf("another archive for the job: %d %q", res.Code, res.Message)
	}
	d := inst.Job(t, 1, job.ID)
	if len(d.Artifacts) != 3 || d.Artifacts[0].FileType != "archive" || d.Artifacts[0].Size != small.Size {
		t.Fatalf("job's artifacts: %+v", d.Artifacts)
	}
	for _, a := range d.Artifacts {
		if (a.FileType == "junit") != (a.ExpireAt == nil) {
			t.Errorf("%s expires at %v (junit was uploaded with expire_in=never)", a.FileType, a.ExpireAt)
		}
		if a.FileType == "dotenv" && (a.ExpireAt == nil || a.ExpireAt.Sub(time.Now().Add(30*24*time.Hour)).Abs() > time.Minute) {
			t.Errorf("dotenv without expire_in: expires at %v, want the default of 30 days", a.ExpireAt)
		}
	}

	// Listings show them too: the pipeline's jobs, the jobs in a state.
	var listed []api.JobDetail
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/1/pipelines/%d/jobs", p.ID), nil, &listed)
	for _, j := range listed {
		if want := map[int64]int{job.ID: 3}[j.ID]; len(j.Artifacts) != want || j.Artifacts == nil {
			t.Errorf("pipeline jobs: %s lists %v artifacts, want %d", j.Name, j.Artifacts, want)
		}
	}
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/admin/jobs?status=running", nil, &listed)
	if len(listed) != 1 || len(listed[0].Artifacts) != 3 || listed[0].ArtifactsFile == nil {
		t.Errorf("running jobs: %+v, want job %d with its 3 artifacts", listed, job.ID)
	}

	// Refused and redundant uploads left objects only as long as the artifacts pass lets them.
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, cleanup := counts(t, inst); n != 3 || cleanup != 0 {
		t.Errorf("after a pass: %d artifacts, %d objects listed for cleanup; want 3 and 0", n, cleanup)
	}
	if objs := objects(t, inst); len(objs) != 3 {
		t.Errorf("objects in the store: %v, want the 3 artifacts'", objs)
	}
	if v := inst.Metric(t, "jobapi_artifacts_stored"); v != 3 {
		t.Errorf("jobapi_artifacts_stored = %v after the pass, want 3", v)
	}
	if v := inst.Metric(t, "jobapi_artifacts_stored_bytes"); v != float64(small.Size)+float64(len(gz(t, "<testsuite/>"))+len(gz(t, "A=1\n"))) {
		t.Errorf("jobapi_artifacts_stored_bytes = %v", v)
	}

	// A finished job cannot upload any more; Job-Status says why.
	r.Finish(t, job, runnerclient.StateSuccess, "")
	res = upload(t, r, job, small.Content(), runnerclient.ArtifactsOptions{BaseName: "late.zip", Format: "zip", Type: "archive"})
	if res.Code != 403 || res.Header.Get("Job-Status") != "success" {
		t.Errorf("upload after the job finished: %d Job-Status %q", res.Code, res.Header.Get("Job-Status"))
	}
}

// A body that is not multipart, or has no file part, is a 400 with a message.
func TestUploadMalformedBodies(t *testing.T) {
	t.Parallel()
	inst := start(t, jobapitest.Options{})
	r := inst.NewRunner(t)
	inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "a", "stage": "build", "script": "make"})
	job := r.TakeNamed(t, "a")
	path := fmt.Sprintf("/api/v4/jobs/%d/artifacts", job.ID)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("metadata", "x")
	_ = mw.Close()
	for _, c := range []struct {
		name, contentType, body, want string
	}{
		{"json body", "application/json", `{"file":"x"}`, "multipart/form-data"},
		{"no file part", mw.FormDataContentType(), body.String(), "no part named file"},
		{"broken multipart", "multipart/form-data; boundary=xyz", "--xyz\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nPK", "request body"},
	} {
		resp, b := jobapitest.Send(t, inst.URL, "POST", path, c.body, "Content-Type", c.contentType, "JOB-TOKEN", job.Token)
		var e api.Error
		if resp.StatusCode != 400 || jsonDecode(b, &e) != nil || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.name, resp.StatusCode, b, c.want)
		}
	}
	// A declared length past the limit is refused before a byte of the body is sent.
	conn, err := net.Dial("tcp", strings.TrimPrefix(inst.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nJOB-TOKEN: %s\r\nContent-Type: %s\r\nContent-Length: 999999999999\r\n\r\n",
		path, job.Token, mw.FormDataContentType())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "maximum size limit") {
		t.Errorf("Content-Length of a terabyte: %d %s, want 413", resp.StatusCode, b)
	}
}

func jsonDecode(b []byte, v any) error { return json.Unmarshal(b, v) }

// An upload cut off mid-stream (the runner's machine died, the network broke) leaves no
// artifact and no object: the handler removes what the store had received at once.
func TestUploadCutOffLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			inst := start(t, jobapitest.Options{Configure: b.configure(t)})
			r := inst.NewRunner(t)
			inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "a", "stage": "build", "script": "make"})
			job := r.TakeNamed(t, "a")
			zip := makeZip(t, 20<<20)

			conn, err := net.Dial("tcp", strings.TrimPrefix(inst.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			boundary := "cutcutcut"
			fmt.Fprintf(conn, "POST /api/v4/jobs/%d/artifacts?artifact_format=zip&artifact_type=archive HTTP/1.1\r\n"+
				"Host: x\r\nJOB-TOKEN: %s\r\nContent-Type: multipart/form-data; boundary=%s\r\nTransfer-Encoding: chunked\r\n\r\n",
				job.ID, job.Token, boundary)
			f, err := os.Open(zip.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			head := fmt.Sprintf("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"artifacts.zip\"\r\n"+
				"Content-Type: application/octet-stream\r\n\r\n", boundary)
			fmt.Fprintf(conn, "%x\r\n%s\r\n", len(head), head)
			buf := make([]byte, 1<<20)
			for i := 0; i < 12; i++ { // 12 of the 20 MB, then the line goes dead
				n, _ := io.ReadFull(f, buf)
				fmt.Fprintf(conn, "%x\r\n", n)
				if _, err := conn.Write(buf[:n]); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(conn, "\r\n")
			}
			testenv.Eventually(t, 10*time.Second, "the upload to register", func() bool {
				_, cleanup := counts(t, inst)
				return cleanup == 1
			})
			_ = conn.Close()
			testenv.Eventually(t, 10*time.Second, "the cut-off upload's object to be removed", func() bool {
				n, cleanup := counts(t, inst)
				return n == 0 && cleanup == 0
			})
			if objs := objects(t, inst); len(objs) != 0 {
				t.Errorf("objects left: %v", objs)
			}
			// The runner tries again, whole, and succeeds.
			wantUpload(t, "the retry", upload(t, r, job, zip.Content(), zipArchive), http.StatusCreated, runnerclient.UploadSucceeded)
		})
	}
}

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
