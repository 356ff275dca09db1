package reaper_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/reaper"
	"github.com/jobapi/jobapi/testenv"
)

// Delayed jobs are queued once their time has come, batch by batch, and not before; the
// pipelines they belong to are reported for the waiters.
func TestDueJobsQueued(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := pgstore.New(testenv.Pool(t))
	now := time.Now().UTC().Truncate(time.Microsecond)
	var pipelines []int64
	for i, startIn := range []int{60, 60, 60, 3600} {
		d := builds.PipelineDefinition{ProjectID: 1, Stages: []string{"deploy"}, Jobs: []builds.JobDefinition{
			{Name: "later", Stage: "deploy", Script: []string{"x"}, When: builds.WhenDelayed, StartInSeconds: startIn}}}
		if err := d.Normalize(); err != nil {
			t.Fatal(err)
		}
		p, err := store.CreatePipeline(ctx, d, now.Add(time.Duration(i)*time.Second))
		if err != nil || p.Status != builds.PipelineScheduled {
			t.Fatalf("pipeline %d: %s, %v; want scheduled", i, p.Status, err)
		}
		pipelines = append(pipelines, p.ID)
	}
	var notified []int64
	d := &reaper.DueJobs{Store: store, Batch: 2, Now: func() time.Time { return now.Add(30 * time.Second) },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Notify: func(_ context.Context, ids []int64) { notified = append(notified, ids...) }}
	if n, err := d.EnqueueOnce(ctx); err != nil || n != 0 {
		t.Fatalf("before their time: queued %d, %v", n, err)
	}
	d.Now = func() time.Time { return now.Add(10 * time.Minute) }
	if n, err := d.EnqueueOnce(ctx); err != nil || n != 3 {
		t.Fatalf("after start_in: queued %d, %v; want the 3 one-minute jobs, in batches of 2", n, err)
	}
	if len(notified) != 3 {
		t.Errorf("pipelines notified %v, want %v", notified, pipelines[:3])
	}
	for i, id := range pipelines {
		p, err := store.Pipeline(ctx, 1, id)
		want := builds.PipelinePending
		if i == 3 {
			want = builds.PipelineScheduled
		}
		if err != nil || p.Status != want {
			t.Errorf("pipeline %d: %s, %v; want %s", i, p.Status, err, want)
		}
	}
}
