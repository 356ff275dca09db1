package views

import (
	"slices"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Durations are GitLab's duration and queued_duration of a job or a pipeline: time spent
// running apart from time spent waiting for a runner. Nil: not started (Run) or never
// queued (Queued).
type Durations struct {
	Run    *time.Duration
	Queued *time.Duration
}

// JobDurations: Run from started_at to finished_at (to now while it runs); Queued from
// queued_at to started_at (to now while it waits; to finished_at when it ended without
// starting, as a job canceled in the queue waited only that long).
func JobDurations(b builds.Build, now time.Time) Durations {
	var d Durations
	if b.StartedAt != nil {
		end := now
		if b.FinishedAt != nil {
			end = *b.FinishedAt
		}
		run := max(end.Sub(*b.StartedAt), 0)
		d.Run = &run
	}
	if b.QueuedAt != nil {
		end := now
		switch {
		case b.StartedAt != nil:
			end = *b.StartedAt
		case b.FinishedAt != nil:
			end = *b.FinishedAt
		}
		q := max(end.Sub(*b.QueuedAt), 0)
		d.Queued = &q
	}
	return d
}

// RunsOf collects p's runs from its builds. Bridges count as
// GitLab's processables do: from their start to their end.
func RunsOf(p builds.Pipeline) builds.PipelineRuns {
	var r builds.PipelineRuns
	for _, b := range p.Builds {
		if b.StartedAt == nil {
			continue
		}
		if r.FirstStarted == nil || b.StartedAt.Before(*r.FirstStarted) {
			t := *b.StartedAt
			r.FirstStarted = &t
		}
		if b.RetriedBy == 0 {
			r.Periods = append(r.Periods, builds.RunPeriod{Started: *b.StartedAt, Finished: b.FinishedAt})
		}
	}
	return r
}

// PipelineDurations: Run is the time some latest job was running, overlaps counted once
// (GitLab's Ci::Pipeline::Duration): waits for a runner between stages, and the runs of
// attempts a retry replaced, are left out, so a pipeline retried half an hour later shows
// its jobs' time, not the half hour. Queued is from the pipeline's creation to its first
// job's start (to now while none has started; nil once it finished without any).
func PipelineDurations(p builds.Pipeline, now time.Time) Durations {
	runs := RunsOf(p)
	if p.Runs != nil {
		runs = *p.Runs
	}
	var d Durations
	if runs.FirstStarted != nil {
		q := max(runs.FirstStarted.Sub(p.CreatedAt), 0)
		d.Queued = &q
	} else if p.FinishedAt == nil {
		q := max(now.Sub(p.CreatedAt), 0)
		d.Queued = &q
	}
	if len(runs.Periods) == 0 {
		return d
	}
	periods := slices.Clone(runs.Periods)
	slices.SortFunc(periods, func(a, b builds.RunPeriod) int { return a.Started.Compare(b.Started) })
	var total time.Duration
	var curStart, curEnd time.Time
	for i, pr := range periods {
		end := now
		if pr.Finished != nil {
			end = *pr.Finished
		}
		if end.Before(pr.Started) {
			end = pr.Started
		}
		switch {
		case i == 0:
			curStart, curEnd = pr.Started, end
		case pr.Started.After(curEnd):
			total += curEnd.Sub(curStart)
			curStart, curEnd = pr.Started, end
		case end.After(curEnd):
			curEnd = end
		}
	}
	total += curEnd.Sub(curStart)
	d.Run = &total
	return d
}
