package pgstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/testenv"
)

// TestTraceRangeAndLines: any byte range of a log made of many chunks reads back exactly,
// and the line count before any offset is the count of line breaks, counted in Postgres.
func TestTraceRangeAndLines(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 3, Jobs: []builds.JobDefinition{{Name: "log", Script: []string{"true"}}}})
	b := c.take(t)
	var log []byte
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 {
		// Chunks of uneven sizes, with line breaks, bytes above 0x7e, NULs and backslashes
		// (what encode(…, 'escape') changes) among them.
		chunk := []byte(fmt.Sprintf("chunk %d \x00\\ é \xff\x1b[31mred\x1b[0m\n", i))
		for range rng.IntN(300) {
			chunk = append(chunk, byte(rng.IntN(256)))
		}
		if _, _, err := store.AppendTrace(t.Context(), b.ID, int64(len(log)), chunk, time.Now()); err != nil {
			t.Fatal(err)
		}
		log = append(log, chunk...)
	}
	size := int64(len(log))
	for _, r := range [][2]int64{{0, size}, {0, 1}, {5, 100}, {size - 3, 10}, {size, 10}, {size + 5, 10}, {100, 0}} {
		got, gotSize, err := store.TraceRange(t.Context(), b.ID, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		from := min(r[0], size)
		want := log[from:min(from+r[1], size)]
		if gotSize != size || !bytes.Equal(got, want) {
			t.Errorf("range %v: %d bytes (size %d), want %d bytes (size %d)", r, len(got), gotSize, len(want), size)
		}
	}
	for range 50 {
		from, n := rng.Int64N(size), rng.Int64N(2000)
		got, _, err := store.TraceRange(t.Context(), b.ID, from, n)
		if err != nil {
			t.Fatal(err)
		}
		if want := log[from:min(from+n, size)]; !bytes.Equal(got, want) {
			t.Fatalf("range [%d, +%d): got %q, want %q", from, n, got, want)
		}
	}
	for _, before := range []int64{0, 1, 37, size / 2, size - 1, size, size + 10} {
		n, err := store.TraceLines(t.Context(), b.ID, before)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(bytes.Count(log[:min(before, size)], []byte("\n"))); n != want {
			t.Errorf("lines before %d: %d, want %d", before, n, want)
		}
	}
	if _, _, err := store.TraceRange(t.Context(), b.ID+1000, 0, 10); err == nil {
		t.Error("a range of no build: no error")
	}
}

// TestPipelinesListing filters by project and status, newest first, and says whether
// another page follows.
func TestPipelinesListing(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	var ids []int64
	for i := range 5 {
		p := createPipeline(t, store, builds.PipelineDefinition{ProjectID: int64(10 + i%2), Jobs: []builds.JobDefinition{{Name: "a", Script: []string{"true"}}}})
		ids = append(ids, p.ID)
	}
	if _, err := store.CancelPipeline(t.Context(), 10, ids[0], time.Now(), "test"); err != nil {
		t.Fatal(err)
	}
	listed := func(f views.PipelineFilter, p builds.Page) ([]int64, bool) {
		t.Helper()
		list, more, err := store.Pipelines(t.Context(), f, p)
		if err != nil {
			t.Fatal(err)
		}
		out := []int64{}
		for _, p := range list {
			out = append(out, p.ID)
		}
		return out, more
	}
	if got, more := listed(views.PipelineFilter{}, builds.Page{Page: 1, PerPage: 3}); !slices.Equal(got, []int64{ids[4], ids[3], ids[2]}) || !more {
		t.Errorf("first page: %v more %v", got, more)
	}
	if got, more := listed(views.PipelineFilter{}, builds.Page{Page: 2, PerPage: 3}); !slices.Equal(got, []int64{ids[1], ids[0]}) || more {
		t.Errorf("second page: %v more %v", got, more)
	}
	if got, _ := listed(views.PipelineFilter{ProjectID: 10}, builds.Page{Page: 1, PerPage: 10}); !slices.Equal(got, []int64{ids[4], ids[2], ids[0]}) {
		t.Errorf("project 10: %v", got)
	}
	if got, _ := listed(views.PipelineFilter{ProjectID: 10, Status: builds.PipelineCanceled}, builds.Page{Page: 1, PerPage: 10}); !slices.Equal(got, []int64{ids[0]}) {
		t.Errorf("project 10 canceled: %v", got)
	}
}
