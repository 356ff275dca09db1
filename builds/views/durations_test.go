package views

import (
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
)

func at(min int) *time.Time {
	t := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(min) * time.Minute)
	return &t
}

func mins(d *time.Duration) any {
	if d == nil {
		return nil
	}
	return d.Minutes()
}

func TestJobDurations(t *testing.T) {
	now := *at(100)
	for _, c := range []struct {
		name        string
		b           builds.Build
		run, queued any
	}{
		{"waiting", builds.Build{QueuedAt: at(90)}, nil, 10.0},
		{"running", builds.Build{QueuedAt: at(90), StartedAt: at(96)}, 4.0, 6.0},
		{"finished", builds.Build{QueuedAt: at(10), StartedAt: at(16), FinishedAt: at(20)}, 4.0, 6.0},
		{"canceled in the queue", builds.Build{QueuedAt: at(10), FinishedAt: at(13)}, nil, 3.0},
		{"created, never queued", builds.Build{}, nil, nil},
	} {
		d := JobDurations(c.b, now)
		if mins(d.Run) != c.run || mins(d.Queued) != c.queued {
			t.Errorf("%s: run %v queued %v, want %v %v", c.name, mins(d.Run), mins(d.Queued), c.run, c.queued)
		}
	}
}

// A pipeline's run time is the union of its latest jobs' runs: the waits for runners and the
// attempts a retry replaced are out, so a pipeline retried 30 minutes later shows minutes.
func TestPipelineDurations(t *testing.T) {
	now := *at(40)
	created := *at(0)
	// build 0–6 min after a 6-minute queue; two tests in parallel 7–9 and 8–10; test-b failed
	// and was retried at 30, running since 31.
	p := builds.Pipeline{CreatedAt: created, Builds: []builds.Build{
		{ID: 1, Name: "build", QueuedAt: at(0), StartedAt: at(6), FinishedAt: at(7)},
		{ID: 2, Name: "test-a", QueuedAt: at(7), StartedAt: at(7), FinishedAt: at(9)},
		{ID: 3, Name: "test-b", QueuedAt: at(7), StartedAt: at(8), FinishedAt: at(10), RetriedBy: 4},
		{ID: 4, Name: "test-b", QueuedAt: at(30), StartedAt: at(31)},
		{ID: 5, Name: "deploy"},
	}}
	d := PipelineDurations(p, now)
	// 6–9 (build, test-a) and 31–40 (test-b's retry, running): 3 + 9.
	if mins(d.Run) != 12.0 || mins(d.Queued) != 6.0 {
		t.Errorf("running pipeline: run %v queued %v, want 12 6", mins(d.Run), mins(d.Queued))
	}
	// The same from the periods a listing brings instead of the builds.
	runs := RunsOf(p)
	listed := builds.Pipeline{CreatedAt: created, Runs: &runs}
	if l := PipelineDurations(listed, now); mins(l.Run) != 12.0 || mins(l.Queued) != 6.0 {
		t.Errorf("from Runs: run %v queued %v, want 12 6", mins(l.Run), mins(l.Queued))
	}

	p.Builds[3].FinishedAt = at(33)
	p.FinishedAt = at(33)
	if d := PipelineDurations(p, *at(90)); mins(d.Run) != 5.0 {
		t.Errorf("finished pipeline: run %v, want 5 whatever the time now", mins(d.Run))
	}

	waiting := builds.Pipeline{CreatedAt: created, Builds: []builds.Build{{QueuedAt: at(0)}}}
	if d := PipelineDurations(waiting, *at(4)); d.Run != nil || mins(d.Queued) != 4.0 {
		t.Errorf("pipeline waiting for a runner: run %v queued %v, want nil 4", mins(d.Run), mins(d.Queued))
	}
	canceled := builds.Pipeline{CreatedAt: created, FinishedAt: at(2)}
	if d := PipelineDurations(canceled, *at(4)); d.Run != nil || d.Queued != nil {
		t.Errorf("pipeline canceled before a start: run %v queued %v, want nil nil", mins(d.Run), mins(d.Queued))
	}
}
