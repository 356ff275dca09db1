package artifacts

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// reportArtifacts lists one junit artifact per build, its object key "report-<name>".
type reportArtifacts struct{ Store }

func (reportArtifacts) ArtifactsOf(_ context.Context, ids []int64) (map[int64][]builds.Artifact, error) {
	out := map[int64][]builds.Artifact{}
	for _, id := range ids {
		out[id] = []builds.Artifact{{ID: id, BuildID: id, FileType: "junit", FileFormat: builds.ArtifactFormatGzip,
			ObjectKey: "report-" + string(rune('a'+id))}}
	}
	return out, nil
}

// unusedBuilds is a core the test report of a build already read never asks.
type unusedBuilds struct{ Builds }

// heldObjects serves every object as a one-case gzipped report, after hold is closed, and
// counts the opens; an object store that is slow on purpose.
type heldObjects struct {
	builds.ObjectStore
	hold  chan struct{}
	opens atomic.Int64
}

func (o *heldObjects) Open(ctx context.Context, key string, _, _ int64) (io.ReadCloser, error) {
	o.opens.Add(1)
	select {
	case <-o.hold:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = io.WriteString(zw, `<testsuite><testcase name="`+key+`"/></testsuite>`)
	_ = zw.Close()
	return io.NopCloser(&b), nil
}

// Reports are parsed in a bounded number of slots: with both taken by reads the store holds
// up, a third report waits at most its wait and is refused with ErrUnavailable (a 503 with
// Retry-After), or less when its request ends first; a view of a report another view is
// parsing waits for that parse instead of starting its own. Once parsed, a report is read
// from the replica's cache, without the store.
func TestJUnitParseSlots(t *testing.T) {
	t.Parallel()
	objects := &heldObjects{hold: make(chan struct{})}
	s := New(Deps{Builds: unusedBuilds{}, Objects: objects, Store: reportArtifacts{}})
	s.reports = newJUnitReports(2, 2*time.Second, junitCacheSize)
	ctx := context.Background()
	job := func(id int64) builds.Build { return builds.Build{ID: id, Name: "unit"} }

	var wg sync.WaitGroup
	results := make([]TestReport, 3)
	errs := make([]error, 3)
	view := func(i int, id int64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.JobTestReport(ctx, job(id))
		}()
	}
	view(0, 1)
	view(1, 2)
	for objects.opens.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, err := s.JobTestReport(ctx, job(3))
	if !errors.Is(err, builds.ErrUnavailable) || time.Since(start) > 10*time.Second {
		t.Errorf("a third report with both slots busy: %v after %v, want ErrUnavailable after the wait", err, time.Since(start))
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.JobTestReport(short, job(3)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a request that ends while it waits: %v", err)
	}
	view(2, 1) // the report view 0 is parsing
	time.Sleep(20 * time.Millisecond)
	close(objects.hold)
	wg.Wait()
	for i, want := range []string{"report-b", "report-c", "report-b"} {
		if errs[i] != nil || results[i].TotalCount != 1 || results[i].Suites[0].Cases[0].Name != want {
			t.Errorf("view %d: %+v, %v; want the case %s", i, results[i], errs[i], want)
		}
	}
	if n := objects.opens.Load(); n != 2 {
		t.Errorf("the store was read %d times for two reports, want 2", n)
	}
	for range 3 {
		if rep, err := s.JobTestReport(ctx, job(1)); err != nil || rep.TotalCount != 1 {
			t.Fatalf("a parsed report again: %+v, %v", rep, err)
		}
	}
	if rep, err := s.JobTestReport(ctx, job(3)); err != nil || rep.TotalCount != 1 {
		t.Errorf("the third report once a slot is free: %+v, %v", rep, err)
	}
	if n := objects.opens.Load(); n != 3 {
		t.Errorf("the store was read %d times for three reports viewed eight times, want 3", n)
	}
}

// The cache holds at most its budget of bytes, dropping the least recently used reports.
func TestJUnitCacheBudget(t *testing.T) {
	t.Parallel()
	c := newJUnitReports(1, time.Second, 10_000)
	report := func(key string) *parsedReport {
		return &parsedReport{key: key, err: errors.New(strings.Repeat("x", 3000))}
	}
	for _, k := range []string{"a", "b", "c"} {
		c.put(report(k))
	}
	kept := func(key string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.byKey[key]
		return ok
	}
	// Read: "b" is now the oldest.
	if _, err := c.read(context.Background(), "a", func() (*parsedReport, error) {
		t.Error("a kept report parsed again")
		return report("a"), nil
	}); err != nil {
		t.Fatal(err)
	}
	c.put(report("d"))
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if ok := kept(k); ok != want {
			t.Errorf("%s kept: %v, want %v", k, ok, want)
		}
	}
	if c.size > c.max {
		t.Errorf("size %d over the budget %d", c.size, c.max)
	}
	c.put(&parsedReport{key: "huge", err: errors.New(strings.Repeat("x", 20_000))})
	if kept("huge") {
		t.Error("a report larger than the whole budget was kept")
	}
}
