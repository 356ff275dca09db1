package artifacttest_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestDirectDownload: gitlab-runner asks for a dependency's archive with
// direct_download=true. On S3 jobapi answers 302 to a presigned URL of the object, valid
// for five minutes, which the runner's HTTP client (Go's defaults: it follows a redirect
// with the same headers, as network/client.go of v17.9.3 sets no CheckRedirect) reads from
// the store itself; the URL works without any jobapi credential. The directory store
// cannot presign and streams the archive as before; so does direct_download=false. A
// refused token gets its 403, never a URL.
func TestDirectDownload(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			inst := start(t, jobapitest.Options{Configure: b.configure(t)})
			r := inst.NewRunner(t)
			inst.CreateYAML(t, 1, "", ciYAML)
			compile := r.TakeNamed(t, "compile")
			lint := r.TakeNamed(t, "lint")
			zip := makeZip(t, 3<<20)
			wantUpload(t, "upload", upload(t, r, compile, zip.Content(), zipArchive), http.StatusCreated, runnerclient.UploadSucceeded)
			r.Finish(t, compile, runnerclient.StateSuccess, "")
			r.Finish(t, lint, runnerclient.StateSuccess, "")
			unit := r.TakeAll(t, 3)["unit"]
			dep := dependency(t, unit, "compile")

			// What jobapi answers, redirects not followed.
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			get := func(u string, hdr ...string) (*http.Response, [32]byte, int64) {
				req, err := http.NewRequest("GET", u, nil)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				resp, err := noFollow.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				h := sha256.New()
				n, err := io.Copy(h, resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				var sum [32]byte
				copy(sum[:], h.Sum(nil))
				return resp, sum, n
			}
			path := fmt.Sprintf("%s/api/v4/jobs/%d/artifacts?direct_download=true", inst.URL, dep.ID)
			resp, sum, _ := get(path, "JOB-TOKEN", dep.Token)
			switch b.name {
			case "s3":
				loc := resp.Header.Get("Location")
				u, err := url.Parse(loc)
				if resp.StatusCode != http.StatusFound || err != nil || u.Host == "" || strings.Contains(loc, inst.URL) {
					t.Fatalf("direct_download on S3: %d Location %q, want 302 to the store", resp.StatusCode, loc)
				}
				if u.Query().Get("X-Amz-Expires") != "300" || resp.Header.Get("Cache-Control") != "no-store" {
					t.Errorf("presigned URL %q (Cache-Control %q): want X-Amz-Expires=300 and no-store", loc, resp.Header.Get("Cache-Control"))
				}
				// The URL alone opens the object, named as the upload was.
				resp, sum, n := get(loc)
				if resp.StatusCode != http.StatusOK || sum != zip.Sum || n != zip.Size {
					t.Fatalf("GET of the presigned URL: %d, %d bytes", resp.StatusCode, n)
				}
				if cd := resp.Header.Get("Content-Disposition"); !strings.Contains(cd, "artifacts.zip") {
					t.Errorf("Content-Disposition from the store %q, want the archive's name", cd)
				}
			default:
				if resp.StatusCode != http.StatusOK || sum != zip.Sum {
					t.Fatalf("direct_download on a directory store: %d, want the archive itself", resp.StatusCode)
				}
			}

			// The runner's own download, redirect followed as its client does.
			direct := true
			h := sha256.New()
			res, err := r.DownloadArtifacts(context.Background(), dep, h, &direct)
			if err != nil {
				t.Fatal(err)
			}
			wantDownload(t, "the runner's direct download", res, http.StatusOK, runnerclient.DownloadSucceeded)
			if got := h.Sum(nil); string(got) != string(zip.Sum[:]) || res.Bytes != zip.Size {
				t.Fatalf("direct download: %d bytes of other content", res.Bytes)
			}
			notDirect := false
			res, err = r.DownloadArtifacts(context.Background(), dep, io.Discard, &notDirect)
			if err != nil || res.Code != http.StatusOK || res.Bytes != zip.Size {
				t.Fatalf("direct_download=false: %d, %d bytes, %v", res.Code, res.Bytes, err)
			}
			// A refused token learns no URL.
			resp, _, _ = get(path, "JOB-TOKEN", compile.Token)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
				t.Errorf("direct_download with a finished job's token: %d Location %q, want 403", resp.StatusCode, resp.Header.Get("Location"))
			}
		})
	}
}
