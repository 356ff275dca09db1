package storefaulttest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/testenv"
)

// downloadSize is large enough that a reader stopped 4 MB in leaves most of the object
// unread in the store, past what the sockets between the store, jobapi and the client
// buffer.
const downloadSize = 64 << 20

// pausingWriter hashes what a download writes and, once at bytes have arrived, calls do
// before taking more: the client stops reading while do runs.
type pausingWriter struct {
	*hashWriter
	at, n int64
	do    func()
}

func (w *pausingWriter) Write(p []byte) (int, error) {
	before := w.n
	w.n += int64(len(p))
	if before < w.at && w.n >= w.at {
		w.do()
	}
	return w.hashWriter.Write(p)
}

// TestStoreRestartedMidDownload: the store crashes and restarts while a 64 MB archive streams out of
// it, 4 MB into the client's read (the client stops reading until the store is down and
// back). Through jobapi (the operator's download, and a dependent job's download without
// direct_download) the stream must come out whole or fail visibly (never a short body taken
// for the archive); with direct_download=true the runner reads the store itself from the
// presigned URL, and its next try, once the store is back, gets the whole archive.
func TestStoreRestartedMidDownload(t *testing.T) {
	t.Parallel()
	srv := testenv.OwnS3(t)
	inst := start(t, srv, srv.Endpoint, jobapitest.Options{})
	r := inst.NewRunner(t)
	r.MaxWait = 0
	inst.CreateYAML(t, 1, "", "stages: [build, test]\na:\n  stage: build\n  script: make\n  artifacts:\n    paths: [out/]\n"+
		"b:\n  stage: test\n  script: make test\n")
	a := r.TakeNamed(t, "a")
	zip := jobapitest.MakeZip(t, downloadSize, nil)
	if res, err := r.UploadArtifacts(context.Background(), a, zip.Content(), zipArchive); err != nil || res.Code != http.StatusCreated {
		t.Fatalf("upload: %d %v", res.Code, err)
	}
	r.Finish(t, a, runnerclient.StateSuccess, "")
	b := r.TakeNamed(t, "b")
	var dep runnerclient.Dependency
	for _, d := range b.Dependencies {
		if d.Name == "a" {
			dep = d
		}
	}

	// restartAt is a writer that crashes and restarts the store (down for a second) once
	// 4 MB arrived.
	restartAt := func(what string) (*pausingWriter, func()) {
		var wg sync.WaitGroup
		w := &pausingWriter{hashWriter: newHash(), at: 4 << 20, do: func() {
			wg.Add(1)
			defer wg.Done()
			t.Logf("%s: store crashed and restarted 4 MB in, no answer for %v", what, crashRestart(t, srv, time.Second).Round(time.Millisecond))
		}}
		return w, wg.Wait
	}

	t.Run("operator", func(t *testing.T) {
		w, wait := restartAt("operator download")
		resp, err := jobapitest.HTTPClient.Do(operatorGet(t, inst, fmt.Sprintf("/api/v4/projects/1/jobs/%d/artifacts", a.ID)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(w, resp.Body)
		wait()
		switch {
		case resp.StatusCode != http.StatusOK:
			t.Fatalf("operator download: %d", resp.StatusCode)
		case err != nil:
			t.Errorf("operator download: cut after %d of %d bytes: %v", n, zip.Size, err)
		case w.sum() != zip.Sum:
			t.Errorf("operator download: %d bytes that differ from the archive, and no error", n)
		}
	})

	t.Run("dependency", func(t *testing.T) {
		w, wait := restartAt("dependency download through jobapi")
		direct := false
		res, err := r.DownloadArtifacts(context.Background(), dep, w, &direct)
		wait()
		switch {
		case res.Code != http.StatusOK:
			t.Fatalf("dependency download: %d %v", res.Code, err)
		case err != nil:
			t.Errorf("dependency download: cut after %d of %d bytes: %v", res.Bytes, zip.Size, err)
		case w.sum() != zip.Sum:
			t.Errorf("dependency download: %d bytes that differ from the archive, and no error", res.Bytes)
		}
	})

	t.Run("direct", func(t *testing.T) {
		w, wait := restartAt("direct download from the store")
		direct := true
		res, err := r.DownloadArtifacts(context.Background(), dep, w, &direct)
		wait()
		if err == nil && w.sum() != zip.Sum {
			t.Fatalf("direct download: %d bytes that differ from the archive, and no error", res.Bytes)
		}
		t.Logf("direct download, first try: %d %v after %d bytes (%v)", res.Code, res.State, res.Bytes, err)
		if err != nil {
			// The runner reads the store itself: its retry, the store back, gets it whole.
			h := newHash()
			res, err = r.DownloadArtifacts(context.Background(), dep, h, &direct)
			if err != nil || res.State != runnerclient.DownloadSucceeded || h.sum() != zip.Sum {
				t.Fatalf("direct download, retry: %d %v %v", res.Code, res.State, err)
			}
		}
	})
}
