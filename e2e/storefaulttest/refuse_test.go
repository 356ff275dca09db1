package storefaulttest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

// throttler is a fault injector in front of the store: an HTTP proxy that, while on,
// answers every request as S3 does when it throttles (503 SlowDown), and otherwise passes
// it through untouched (the Host header kept: the store checks the signature over it).
type throttler struct {
	URL     string
	on      atomic.Bool
	refused atomic.Int64
}

func newThrottler(t *testing.T, endpoint string) *throttler {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	th := &throttler{}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !th.on.Load() {
			rp.ServeHTTP(w, r)
			return
		}
		th.refused.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><Resource>%s</Resource><RequestId>throttled</RequestId></Error>`,
			r.URL.Path)
	}))
	t.Cleanup(s.Close)
	th.URL = s.URL
	return th
}

// TestStoreRefusing: the store throttles every request (503 SlowDown), then refuses writes
// as a bucket over its quota does (SeaweedFS's read-only storage rule: 403 AccessDenied).
// An upload is answered 503 with Retry-After (the runner retries), a download 503 with
// Retry-After before any byte, a finished job's log waits in Postgres for its archive; no
// artifact row without its object. Once the store takes requests again the runner's retry
// stores the archive whole, the pass archives the log, and what was stored before is
// intact.
func TestStoreRefusing(t *testing.T) {
	t.Parallel()
	srv := testenv.OwnS3(t)
	th := newThrottler(t, srv.Endpoint)
	var clock atomic.Int64
	inst := start(t, srv, th.URL, jobapitest.Options{Now: func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }})
	r := inst.NewRunner(t)
	r.MaxWait = 0
	inst.CreatePipeline(t, 1, []string{"build"},
		jobapitest.Job{"name": "before", "stage": "build", "script": "make"},
		jobapitest.Job{"name": "throttled", "stage": "build", "script": "make"},
		jobapitest.Job{"name": "full", "stage": "build", "script": "make"},
		jobapitest.Job{"name": "log", "stage": "build", "script": "make"})
	jobs := r.TakeAll(t, 4)
	before := jobapitest.MakeZip(t, 3<<20, nil)
	if res, err := r.UploadArtifacts(context.Background(), jobs["before"], before.Content(), zipArchive); err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload before the fault: %d %v", res.Code, err)
	}
	beforePath := fmt.Sprintf("/api/v4/projects/1/jobs/%d/artifacts", jobs["before"].ID)
	log := makeLog(2<<20+5, "throttled")
	logJob := jobs["log"]
	for off := 0; off < len(log); off += 1 << 20 {
		if res := r.Patch(t, logJob, off, string(log[off:min(len(log), off+1<<20)])); res.Code != http.StatusAccepted {
			t.Fatalf("PATCH at %d: %d", off, res.Code)
		}
	}

	// Throttled: every request refused with 503 SlowDown.
	th.on.Store(true)
	big := jobapitest.MakeZip(t, 20<<20, nil)
	began := time.Now()
	res, err := r.UploadArtifacts(context.Background(), jobs["throttled"], big.Content(), zipArchive)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("throttled: an upload answered %d (Retry-After %q) after %v, %d requests refused by the store",
		res.Code, res.Header.Get("Retry-After"), time.Since(began).Round(time.Millisecond), th.refused.Load())
	if res.Code != http.StatusServiceUnavailable || res.State != runnerclient.UploadServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Errorf("upload while throttled: %d %v Retry-After %q, want 503 with Retry-After", res.Code, res.State, res.Header.Get("Retry-After"))
	}
	resp, body := inst.Do(t, "GET", beforePath, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("operator download while throttled: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	} else {
		jobapitest.WantJSONError(t, resp, body, http.StatusServiceUnavailable)
	}
	r.Finish(t, logJob, runnerclient.StateSuccess, "")
	testenv.Eventually(t, 30*time.Second, "a failed archive attempt while throttled", func() bool {
		return jobapitest.QueryInt(t, inst.Pool, "SELECT coalesce((SELECT attempts FROM trace_archives WHERE build_id = $1), 0)", logJob.ID) > 0
	})
	if rows, _ := artifactRows(t, inst, jobs["throttled"].ID, "archive"); rows != 0 {
		t.Errorf("an artifact row for the refused upload")
	}
	if chunks := liveChunks(t, inst, logJob.ID); chunks == 0 {
		t.Fatal("the live log was dropped while the store refused its archive")
	}
	th.on.Store(false)

	// Full: the bucket takes no writes (reads go on).
	srv.Fill(t, true)
	res, err = r.UploadArtifacts(context.Background(), jobs["full"], big.Content(), zipArchive)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bucket over its quota: an upload answered %d (Retry-After %q): %s", res.Code, res.Header.Get("Retry-After"), res.Message)
	if res.Code != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Errorf("upload to a full bucket: %d %v Retry-After %q, want 503 with Retry-After", res.Code, res.State, res.Header.Get("Retry-After"))
	}
	resp, body = inst.Do(t, "GET", beforePath, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(sha(body), before.Sum[:]) {
		t.Errorf("download from a full bucket: %d, want 200 and the archive", resp.StatusCode)
	}
	srv.Fill(t, false)

	// Back: the runner's retries store the archives whole; the log is archived.
	for _, name := range []string{"throttled", "full"} {
		res, err := r.UploadArtifacts(context.Background(), jobs[name], big.Content(), zipArchive)
		if err != nil || res.Code != http.StatusCreated {
			t.Fatalf("%s: the retry once the store takes writes: %d %v", name, res.Code, err)
		}
		var key string
		if err := inst.Pool.QueryRow(context.Background(),
			`SELECT object_key FROM job_artifacts WHERE build_id = $1 AND file_type = 'archive'`, jobs[name].ID).Scan(&key); err != nil {
			t.Fatal(err)
		}
		if storedObject(t, srv, key) != big.Sum {
			t.Errorf("%s: the stored archive differs from the one sent", name)
		}
	}
	resp, body = inst.Do(t, "GET", beforePath, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(sha(body), before.Sum[:]) {
		t.Errorf("the archive stored before the faults: %d, want 200 and its bytes", resp.StatusCode)
	}
	clock.Store(int64(time.Hour))
	if _, err := inst.Traces.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, body = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", logJob.ID), nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, log) || resp.Header.Get("ETag") == "" {
		t.Errorf("the log after the pass: %d, %d bytes, ETag %q; want the archive of the whole log", resp.StatusCode, len(body), resp.Header.Get("ETag"))
	}
	if chunks := liveChunks(t, inst, logJob.ID); chunks != 0 {
		t.Errorf("%d live chunks left after the archive", chunks)
	}
	// An archived log read with the store throttling is a 503 too, not a 200 cut short.
	th.on.Store(true)
	resp, body = inst.Do(t, "GET", fmt.Sprintf("/api/v4/projects/1/jobs/%d/trace", logJob.ID), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("archived trace while throttled: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	} else {
		jobapitest.WantJSONError(t, resp, body, http.StatusServiceUnavailable)
	}
	th.on.Store(false)

	clock.Store(int64(3 * time.Hour))
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := srv.IncompleteUploads(t); len(left) > 0 {
		t.Errorf("unfinished multipart uploads left in the bucket: %v", left)
	}
	if keys := objectKeys(t, srv); len(keys) != 4 {
		t.Errorf("objects in the bucket: %v, want the three archives and the log", keys)
	}
}
