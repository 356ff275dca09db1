package tracetest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestTraceRange: the trace endpoint answers HTTP ranges the same from the live log (in
// Postgres, read a window at a time) and from the archive (in the object store): 206 with
// Content-Range for bytes=N-, N-M and -N, 416 with bytes */size for a start past the end
// (what a tail reads as "nothing new"), the whole log without Range, and the archive's
// ETag for conditional requests.
func TestTraceRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, jobapitest.Options{})
	job := e.r.TakeNamed(t, "build")
	log := makeLog(3<<20+12345, "range") // several of the live log's 1 MiB windows
	appendLog(t, e.r, job, log)
	size := len(log)
	cases := []struct {
		name, rng string
		code      int
		from, to  int // the bytes expected, [from, to)
	}{
		{"whole", "", http.StatusOK, 0, size},
		{"open end", "bytes=10-", http.StatusPartialContent, 10, size},
		{"closed", "bytes=0-4", http.StatusPartialContent, 0, 5},
		{"across windows", fmt.Sprintf("bytes=%d-%d", 1<<20-3, 2<<20+7), http.StatusPartialContent, 1<<20 - 3, 2<<20 + 8},
		{"end past the size", fmt.Sprintf("bytes=%d-%d", size-5, size+100), http.StatusPartialContent, size - 5, size},
		{"suffix", "bytes=-7", http.StatusPartialContent, size - 7, size},
		{"suffix longer than the log", fmt.Sprintf("bytes=-%d", size+10), http.StatusPartialContent, 0, size},
		{"last byte", fmt.Sprintf("bytes=%d-", size-1), http.StatusPartialContent, size - 1, size},
		{"start at the size: nothing new", fmt.Sprintf("bytes=%d-", size), http.StatusRequestedRangeNotSatisfiable, 0, 0},
		{"start past the size", fmt.Sprintf("bytes=%d-", size+10), http.StatusRequestedRangeNotSatisfiable, 0, 0},
		{"reversed", "bytes=9-3", http.StatusRequestedRangeNotSatisfiable, -1, 0},
		{"not bytes", "lines=1-2", http.StatusOK, 0, size},
	}
	check := func(t *testing.T, where string) {
		for _, c := range cases {
			var hdr []string
			if c.rng != "" {
				hdr = []string{"Range", c.rng}
			}
			resp, b := getTrace(t, e.inst, 1, job.ID, hdr...)
			if resp.StatusCode != c.code {
				t.Errorf("%s, %s (%s): %d, want %d", where, c.name, c.rng, resp.StatusCode, c.code)
				continue
			}
			switch c.code {
			case http.StatusPartialContent:
				want := fmt.Sprintf("bytes %d-%d/%d", c.from, c.to-1, size)
				if got := resp.Header.Get("Content-Range"); got != want {
					t.Errorf("%s, %s: Content-Range %q, want %q", where, c.name, got, want)
				}
				fallthrough
			case http.StatusOK:
				if !bytes.Equal(b, log[c.from:c.to]) {
					t.Errorf("%s, %s: %d bytes that differ from the log's [%d, %d)", where, c.name, len(b), c.from, c.to)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
					t.Errorf("%s, %s: Content-Type %q", where, c.name, ct)
				}
			case http.StatusRequestedRangeNotSatisfiable:
				if c.from == -1 {
					break // malformed: refused, no size to say
				}
				if got, want := resp.Header.Get("Content-Range"), fmt.Sprintf("bytes */%d", size); got != want {
					t.Errorf("%s, %s: Content-Range %q, want %q", where, c.name, got, want)
				}
			}
		}
		// Two ranges at once: a multipart/byteranges answer.
		resp, _ := getTrace(t, e.inst, 1, job.ID, "Range", "bytes=0-1,5-6")
		if resp.StatusCode != http.StatusPartialContent || !bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("multipart/byteranges")) {
			t.Errorf("%s, two ranges: %d %s", where, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	check(t, "live")
	if resp, _ := getTrace(t, e.inst, 1, job.ID); resp.Header.Get("ETag") != "" {
		t.Error("a live log has an ETag: it still grows")
	}

	e.r.Finish(t, job, runnerclient.StateSuccess, "")
	waitArchived(t, e.inst, 1, job.ID)
	check(t, "archived")
	resp, _ := getTrace(t, e.inst, 1, job.ID)
	etag := resp.Header.Get("ETag")
	if resp, _ := getTrace(t, e.inst, 1, job.ID, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match with the archive's ETag: %d, want 304", resp.StatusCode)
	}
	if resp, b := getTrace(t, e.inst, 1, job.ID, "Range", "bytes=-3", "If-Range", etag); resp.StatusCode != http.StatusPartialContent || string(b) != string(log[size-3:]) {
		t.Errorf("If-Range with the archive's ETag: %d %q", resp.StatusCode, b)
	}

}
