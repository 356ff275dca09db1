package pgstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// TestOfBuildQueriesFindThePipeline: lockPipelineOfBuild is composed from the same
// fragments as lockPipeline, with the pipeline looked up from the build; a fragment that
// kept its own "$1" would read a build id as a pipeline id. shapeAndNeedersOfBuild names
// $1 once, as the build's id.
func TestOfBuildQueriesFindThePipeline(t *testing.T) {
	if q := lockPipelineOfBuild; !strings.Contains(q, pipelineOfBuild) || strings.Count(q, "$1") != strings.Count(q, pipelineOfBuild) {
		t.Errorf("lockPipelineOfBuild does not look the pipeline up from the build: %s", q)
	}
	if q := shapeAndNeedersOfBuild; strings.Count(q, "$1") != 1 || !strings.Contains(q, "FROM builds WHERE id = $1") {
		t.Errorf("shapeAndNeedersOfBuild does not look the pipeline up from the build: %s", q)
	}
}

// TestFinishFlushesTrace: a Finish with a Flush stores the live bytes in its own UPDATE:
// with the finish when the stored size is the flush's offset; not at all (the finish still
// made) when the stored size is elsewhere; once when a flush made meanwhile stored the same
// bytes already; and neither when the finish loses its compare-and-set.
func TestFinishFlushesTrace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 1, Stages: []string{"test"}, Jobs: []builds.JobDefinition{
		{Name: "a", Stage: "test", Script: []string{"true"}}, {Name: "b", Stage: "test", Script: []string{"true"}},
		{Name: "c", Stage: "test", Script: []string{"true"}}, {Name: "d", Stage: "test", Script: []string{"true"}}}})
	finish := func(id int64, tokenHash []byte, offset int64, data string) (builds.Finished, error) {
		return store.Finish(ctx, builds.Finish{BuildID: id, From: []builds.Status{builds.StatusRunning}, To: builds.StatusSuccess,
			Event: builds.EventFinished, Now: time.Now(), TokenHash: tokenHash, Flush: &builds.TraceFlush{Offset: offset, Data: []byte(data)}})
	}
	stored := func(id int64) string {
		t.Helper()
		log, err := store.Trace(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return string(log)
	}

	a := c.take(t)
	if _, _, err := store.AppendTrace(ctx, a.ID, 0, []byte("durable\n"), time.Now()); err != nil {
		t.Fatal(err)
	}
	f, err := finish(a.ID, a.TokenHash, int64(len("durable\n")), "live tail\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(a.ID); got != "durable\nlive tail\n" || f.Build.TraceSize != int64(len(got)) || f.Build.Status != builds.StatusSuccess {
		t.Errorf("finish with a flush at the stored size: log %q, trace_size %d, status %s", got, f.Build.TraceSize, f.Build.Status)
	}

	b := c.take(t)
	f, err = finish(b.ID, b.TokenHash, 5, "elsewhere\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(b.ID); got != "" || f.Build.TraceSize != 0 || f.Build.Status != builds.StatusSuccess {
		t.Errorf("finish with a flush past the stored size: log %q, trace_size %d, status %s; want the finish alone",
			got, f.Build.TraceSize, f.Build.Status)
	}

	d := c.take(t)
	if _, err := store.FlushTrace(ctx, d.ID, 0, []byte("flushed twice\n"), time.Now()); err != nil {
		t.Fatal(err)
	}
	f, err = finish(d.ID, d.TokenHash, 0, "flushed twice\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(d.ID); got != "flushed twice\n" || f.Build.TraceSize != int64(len(got)) {
		t.Errorf("finish with a flush another flush stored meanwhile: log %q, trace_size %d; want the bytes once", got, f.Build.TraceSize)
	}

	e := c.take(t)
	if _, err := finish(e.ID, b.TokenHash, 0, "not stored\n"); !errors.Is(err, builds.ErrConflict) {
		t.Fatalf("finish with another build's job token: %v, want ErrConflict", err)
	}
	if got := stored(e.ID); got != "" {
		t.Errorf("a finish that lost its compare-and-set stored its flush: %q", got)
	}
}
