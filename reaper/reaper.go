// Package reaper runs the workers that end builds and stages nobody moves any more: the
// reapers fail or cancel builds their runners abandoned (SPEC §5), and the stuck-stage
// check applies a pipeline's timeout strategy when its current stage made no progress
// (SPEC §6), and the due pass (DueJobs) queues delayed jobs whose time has come. The
// transitions they make are rows of builds.BuildTransitions; the choices are
// builds.ReapParams.Rules and builds.PlanStuckStage. All are safe on every replica:
// candidates are locked with FOR UPDATE SKIP LOCKED.
package reaper

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/periodic"
)

// batchTimeout bounds one batch so a stuck Postgres call cannot hold row locks.
const batchTimeout = 10 * time.Second

// Reaper fails or cancels builds that their runners abandoned (SPEC §5): running without
// any update, running past the job timeout plus a grace, pending for too long, canceling
// without an answer. Safe on every replica: candidates are locked with SKIP LOCKED.
type Reaper struct {
	Store    builds.Store
	Queue    builds.Queue
	Params   builds.ReapParams // Now is filled per run
	Interval time.Duration
	Now      func() time.Time
	Log      *slog.Logger
	Notify   func(ctx context.Context, pipelineIDs []int64)
	// Ended is told which builds were taken from their runners (their live logs close).
	Ended  func(ctx context.Context, ended []builds.Build)
	OnReap func(builds.ReapResult, error)
}

// ReapOnce runs every reaper once.
func (r *Reaper) ReapOnce(ctx context.Context) (builds.ReapResult, error) {
	p := r.Params
	p.Now = now(r.Now)
	if p.Batch <= 0 {
		p.Batch = 500
	}
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	res, err := r.Store.Reap(ctx, p)
	if res.Queued && r.Queue != nil {
		if err := r.Queue.Bump(ctx); err != nil {
			r.Log.WarnContext(ctx, "queue version not bumped after reaping", "error", err)
		}
	}
	if r.Notify != nil && len(res.Pipelines) > 0 {
		r.Notify(ctx, res.Pipelines)
	}
	if r.Ended != nil && len(res.Ended) > 0 {
		r.Ended(ctx, res.Ended)
	}
	return res, err
}

// Run reaps every Interval until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	return periodic.Run(ctx, r.Interval, r.Log, "reaper", func(ctx context.Context) error {
		res, err := r.ReapOnce(ctx)
		if r.OnReap != nil {
			r.OnReap(res, err)
		}
		if n := res.NoUpdates + res.ExecutionTimeout + res.StuckPending + res.Canceled; err == nil && n > 0 {
			r.Log.WarnContext(ctx, "reaped abandoned builds", "no_updates_running", res.NoUpdates,
				"job_execution_timeout", res.ExecutionTimeout, "stuck_pending", res.StuckPending,
				"canceled", res.Canceled, "retried", res.Retried)
		}
		return err
	})
}

// StuckStages detects pipelines whose current stage made no progress for Timeout and
// applies their timeout strategy (SPEC §6).
type StuckStages struct {
	Store    builds.Store
	Queue    builds.Queue
	Timeout  time.Duration
	Interval time.Duration
	Batch    int
	Now      func() time.Time
	Log      *slog.Logger
	Notify   func(ctx context.Context, pipelineIDs []int64)
	// Ended is told which builds a pessimistic stage took from their runners.
	Ended   func(ctx context.Context, ended []builds.Build)
	OnCheck func(builds.StuckResult, error)
}

// CheckOnce handles every stuck pipeline found now, batch by batch.
func (s *StuckStages) CheckOnce(ctx context.Context) (builds.StuckResult, error) {
	if s.Timeout <= 0 {
		// Off, as a zero threshold turns a reaper off: a zero timeout would find every
		// unfinished pipeline stuck and fail them all.
		return builds.StuckResult{}, nil
	}
	batch := s.Batch
	if batch <= 0 {
		batch = 200
	}
	var total builds.StuckResult
	for {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		res, err := s.Store.HandleStuckStages(bctx, builds.StuckParams{Now: now(s.Now), Timeout: s.Timeout, Batch: batch})
		cancel()
		if err != nil {
			return total, err
		}
		total.Checked += res.Checked
		total.Progress += res.Progress
		total.Stuck = append(total.Stuck, res.Stuck...)
		total.Queued = total.Queued || res.Queued
		ids := make([]int64, 0, len(res.Stuck))
		for _, p := range res.Stuck {
			ids = append(ids, p.PipelineID)
			s.Log.ErrorContext(ctx, "pipeline stuck: its stage made no progress", "pipeline_id", p.PipelineID,
				"project_id", p.ProjectID, "stage", p.Stage, "strategy", p.Strategy,
				"waiting_for", describe(p.Builds), "timeout", s.Timeout.String())
		}
		if res.Queued && s.Queue != nil {
			if err := s.Queue.Bump(ctx); err != nil {
				s.Log.WarnContext(ctx, "queue version not bumped after a stuck stage", "error", err)
			}
		}
		if s.Notify != nil && len(ids) > 0 {
			s.Notify(ctx, ids)
		}
		if s.Ended != nil {
			if ended := endedOnRunner(res.Stuck); len(ended) > 0 {
				s.Ended(ctx, ended)
			}
		}
		if res.Checked < batch {
			return total, nil
		}
	}
}

// endedOnRunner lists the builds the stuck stages' plans took from their runners, with the
// status each ended in (the plan the store carried out).
func endedOnRunner(stuck []builds.StuckPipeline) []builds.Build {
	var ended []builds.Build
	for _, p := range stuck {
		for _, f := range builds.PlanStuckStage(p.Strategy, p.Builds, nil, time.Time{}).Finish {
			if slices.ContainsFunc(f.From, builds.Status.OnRunnerLog) {
				ended = append(ended, builds.Build{ID: f.BuildID, Status: f.To})
			}
		}
	}
	return ended
}

// Run checks every Interval until ctx ends.
func (s *StuckStages) Run(ctx context.Context) error {
	return periodic.Run(ctx, s.Interval, s.Log, "stuck stage check", func(ctx context.Context) error {
		res, err := s.CheckOnce(ctx)
		if s.OnCheck != nil {
			s.OnCheck(res, err)
		}
		return err
	})
}

// describe lists builds as "id name (status)" for the error log.
func describe(bs []builds.StuckBuild) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = strconv.FormatInt(b.ID, 10) + " " + b.Name + " (" + string(b.Status) + ")"
	}
	return strings.Join(parts, ", ")
}

func now(f func() time.Time) time.Time {
	if f != nil {
		return f()
	}
	return time.Now()
}
