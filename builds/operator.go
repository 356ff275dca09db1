package builds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// CreatePipeline validates a definition and stores it; its first stage becomes pending.
func (s *Service) CreatePipeline(ctx context.Context, d PipelineDefinition) (Pipeline, error) {
	if err := d.Normalize(); err != nil {
		return Pipeline{}, err
	}
	if a, ok := ActorFrom(ctx); ok && d.CreatedBy == nil {
		d.CreatedBy = PipelineUserOf(a)
	}
	p, err := s.store.CreatePipeline(ctx, d, s.now())
	if err != nil {
		return Pipeline{}, err
	}
	s.bumpQueue(ctx)
	s.changed(Change{PipelineID: p.ID})
	s.audit(ctx, "pipeline_created", "pipeline:"+strconv.FormatInt(p.ID, 10),
		map[string]any{"project_id": p.ProjectID, "ref": p.Ref, "source": d.Source})
	return p, nil
}

// Pipeline returns a pipeline of a project with its builds.
func (s *Service) Pipeline(ctx context.Context, projectID, id int64) (Pipeline, error) {
	return s.store.Pipeline(ctx, projectID, id)
}

// CancelPipeline cancels every unfinished build of a pipeline for actor.
func (s *Service) CancelPipeline(ctx context.Context, projectID, id int64) (Pipeline, error) {
	p, err := s.store.CancelPipeline(ctx, projectID, id, s.now(), actorName(ctx))
	if err != nil {
		return Pipeline{}, err
	}
	s.afterCancel(ctx, p)
	return p, nil
}

// afterCancel is what follows the store's cancel of pipeline p: waiters, ack leases, the
// live logs of builds asked to cancel, the audit log.
func (s *Service) afterCancel(ctx context.Context, p Pipeline) {
	// Builds ended: waiters answer now, not at their next poll.
	s.notifyPipelines(ctx, p.ID)
	for _, b := range p.Builds {
		if b.Status == StatusCanceled && b.TwoPhase {
			_ = s.leases.Release(ctx, b.ID)
		}
		if b.Status == StatusCanceling {
			s.liveCancel(ctx, b.ID)
		}
	}
	s.audit(ctx, "pipeline_canceled", "pipeline:"+strconv.FormatInt(p.ID, 10), map[string]any{"project_id": p.ProjectID})
}

// RetryPipeline retries the failed and canceled jobs of a pipeline (their latest attempts),
// GitLab's POST …/pipelines/:id/retry: those of stages the pipeline reached run again at
// once, those after wait for them (created), and what was skipped after them comes back;
// the pipeline runs again. A pipeline without such jobs is returned as it is.
func (s *Service) RetryPipeline(ctx context.Context, projectID, id int64) (Pipeline, error) {
	retried, err := s.store.RetryPipeline(ctx, projectID, id, s.now(), actorName(ctx))
	if err != nil {
		return Pipeline{}, err
	}
	if len(retried) > 0 {
		s.bumpQueue(ctx)
		s.changed(Change{PipelineID: id})
		ids := make([]string, len(retried))
		for i, b := range retried {
			ids[i] = strconv.FormatInt(b.RetryOf, 10) + "→" + strconv.FormatInt(b.ID, 10)
		}
		s.audit(ctx, "pipeline_retried", "pipeline:"+strconv.FormatInt(id, 10), map[string]any{"jobs": ids, "project_id": projectID})
	}
	return s.store.Pipeline(ctx, projectID, id)
}

// DeletePipeline removes a finished pipeline with its builds, their events, logs (live
// chunks and archives) and artifacts; the objects of archives and artifacts are queued for
// the artifacts pass, which removes them from the object store. Its child pipelines stay
// (without a parent), as in GitLab. ErrNotFound; ErrPipelineBusy while a job of it has not
// finished.
func (s *Service) DeletePipeline(ctx context.Context, projectID, id int64) error {
	deleted, err := s.store.DeletePipeline(ctx, projectID, id)
	if err != nil {
		return err
	}
	if s.live != nil {
		// Logs not archived yet keep chunks in Redis too: they go now rather than by expiry.
		for _, b := range deleted {
			if err := s.live.Drop(ctx, b.ID, b.Status); err != nil {
				s.log.WarnContext(ctx, "live log of a deleted pipeline not dropped", "build_id", b.ID, "error", err)
			}
		}
	}
	s.changed(Change{PipelineID: id})
	s.audit(ctx, "pipeline_deleted", "pipeline:"+strconv.FormatInt(id, 10), map[string]any{"builds": len(deleted), "project_id": projectID})
	return nil
}

// ErrPipelineBusy: a pipeline with unfinished jobs cannot be deleted.
var ErrPipelineBusy = errors.New("the pipeline has unfinished jobs; cancel it first")

// JobView is a build as operators see it, with the live ack TTL when it waits.
type JobView struct {
	Build
	AckTTL *time.Duration
	// Artifacts are the job's stored artifacts, archive first (nil: not read; package
	// builds/artifacts fills them).
	Artifacts []Artifact
}

// Job returns one build of a project, without its artifacts.
func (s *Service) Job(ctx context.Context, projectID, id int64) (JobView, error) {
	b, err := s.job(ctx, projectID, id)
	if err != nil {
		return JobView{}, err
	}
	return s.view(ctx, b), nil
}

// job returns one build of a project.
func (s *Service) job(ctx context.Context, projectID, id int64) (Build, error) {
	b, err := s.store.Build(ctx, id)
	if err != nil {
		return Build{}, err
	}
	if b.ProjectID != projectID {
		return Build{}, ErrNotFound
	}
	return b, nil
}

func (s *Service) view(ctx context.Context, b Build) JobView {
	v := JobView{Build: b}
	if b.Status.OnRunnerLog() || b.Status.Finished() {
		// The log's end is in Redis while the job runs (Postgres has its full chunks), and
		// after a finish the Service did not make, until the log is archived.
		v.TraceSize = s.logSize(ctx, b)
	}
	if b.Status != StatusWaiting {
		return v
	}
	ttls, err := s.leases.TTLs(ctx, []int64{b.ID})
	if err == nil {
		if ttl, ok := ttls[b.ID]; ok {
			v.AckTTL = &ttl
			deadline := s.now().Add(ttl)
			v.AckDeadline = &deadline
			return v
		}
	}
	// No live key (expired, lost, or Redis down): what is left of the deadline of record.
	if b.AckDeadline != nil {
		left := max(b.AckDeadline.Sub(s.now()), 0)
		v.AckTTL = &left
	}
	return v
}

// Jobs lists builds in a state across projects.
func (s *Service) Jobs(ctx context.Context, status Status, p Page) ([]JobView, int, error) {
	bs, total, err := s.store.BuildsByStatus(ctx, status, p)
	if err != nil {
		return nil, 0, err
	}
	views := make([]JobView, len(bs))
	if status == StatusWaiting && len(bs) > 0 {
		ids := make([]int64, len(bs))
		for i, b := range bs {
			ids[i] = b.ID
		}
		ttls, err := s.leases.TTLs(ctx, ids)
		now := s.now()
		for i, b := range bs {
			views[i] = JobView{Build: b}
			if ttl, ok := ttls[b.ID]; err == nil && ok {
				deadline := now.Add(ttl)
				views[i].AckTTL, views[i].AckDeadline = &ttl, &deadline
			} else if b.AckDeadline != nil {
				left := max(b.AckDeadline.Sub(now), 0)
				views[i].AckTTL = &left
			}
		}
		return views, total, nil
	}
	for i, b := range bs {
		views[i] = JobView{Build: b}
	}
	return views, total, nil
}

// Events returns a build's history, oldest first.
func (s *Service) Events(ctx context.Context, projectID, id int64, p Page) ([]Event, int, error) {
	if _, err := s.job(ctx, projectID, id); err != nil {
		return nil, 0, err
	}
	return s.store.Events(ctx, id, p)
}

// ErrFinished: the operator asked to cancel a build that already ended.
var ErrFinished = errors.New("job is already finished")

// ErrNotRetryable: only finished builds that are the latest attempt can be retried.
var ErrNotRetryable = errors.New("only a finished job that has not been retried yet can be retried")

// CancelJob cancels a build for actor: at once when no runner holds it, through canceling
// when one runs it (the runner is told on its next call and finishes with after_script).
func (s *Service) CancelJob(ctx context.Context, projectID, id int64) (JobView, error) {
	v, err := s.cancelJob(ctx, projectID, id)
	if err != nil {
		return JobView{}, err
	}
	s.audit(ctx, "job_canceled", jobTarget(id), map[string]any{"status": v.Status})
	return v, nil
}

// ForceCancelJob is GitLab's cancel with force=true: a build in canceling (its runner gone,
// so no final update will come) ends canceled now instead of after JOBAPI_CANCELING_TIMEOUT.
// Any other build is canceled as CancelJob does: GitLab's force applies only to canceling,
// and a running build is asked to cancel first so that its runner can still stop it.
func (s *Service) ForceCancelJob(ctx context.Context, projectID, id int64) (JobView, error) {
	for round := 0; round < 5; round++ {
		b, err := s.job(ctx, projectID, id)
		if err != nil {
			return JobView{}, err
		}
		if b.Status != StatusCanceling {
			return s.CancelJob(ctx, projectID, id)
		}
		f, err := s.finish(ctx, Finish{BuildID: id, From: []Status{StatusCanceling}, To: StatusCanceled,
			Event: EventForceCanceled, Detail: map[string]any{"actor": actorName(ctx)}, RunnerManager: b.RunnerSystemID, Now: s.now()})
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return JobView{}, err
		}
		s.audit(ctx, "job_force_canceled", jobTarget(id), nil)
		return s.view(ctx, f.Build), nil
	}
	return JobView{}, fmt.Errorf("force cancel build %d: %w", id, ErrConflict)
}

func (s *Service) cancelJob(ctx context.Context, projectID, id int64) (JobView, error) {
	for round := 0; round < 5; round++ {
		b, err := s.store.Build(ctx, id)
		if err != nil {
			return JobView{}, err
		}
		if b.ProjectID != projectID {
			return JobView{}, ErrNotFound
		}
		now := s.now()
		switch b.Status {
		case StatusCreated, StatusManual, StatusScheduled, StatusWaitingForResource, StatusPending, StatusWaiting:
			f, err := s.finish(ctx, Finish{BuildID: id, From: []Status{b.Status}, To: StatusCanceled,
				Event: EventCanceled, Detail: map[string]any{"actor": actorName(ctx)}, RunnerManager: b.RunnerSystemID, Now: now})
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return JobView{}, err
			}
			if b.Status == StatusWaiting {
				_ = s.leases.Release(ctx, id)
			}
			return s.view(ctx, f.Build), nil
		case StatusRunning:
			if b.Bridge {
				return s.cancelBridge(ctx, b)
			}
			nb, err := s.store.RequestCancel(ctx, id, now, actorName(ctx))
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return JobView{}, err
			}
			s.liveCancel(ctx, id)
			s.changed(Change{PipelineID: nb.PipelineID, BuildID: nb.ID})
			return s.view(ctx, nb), nil
		case StatusCanceling:
			return s.view(ctx, b), nil
		default:
			return JobView{}, ErrFinished
		}
	}
	return JobView{}, fmt.Errorf("cancel build %d: %w", id, ErrConflict)
}

// RetryJob creates a new attempt of a finished build (operator retry) for actor.
func (s *Service) RetryJob(ctx context.Context, projectID, id int64) (JobView, error) {
	b, err := s.store.Build(ctx, id)
	if err != nil {
		return JobView{}, err
	}
	if b.ProjectID != projectID {
		return JobView{}, ErrNotFound
	}
	nb, err := s.store.RetryBuild(ctx, id, s.now(), actorName(ctx))
	if err != nil {
		return JobView{}, err
	}
	s.bumpQueue(ctx)
	s.changed(Change{PipelineID: nb.PipelineID, BuildID: nb.ID})
	v := s.view(ctx, nb)
	s.audit(ctx, "job_retried", jobTarget(id), map[string]any{"new_id": v.ID})
	return v, nil
}

// PlayJob queues a manual build for actor (GitLab's POST …/jobs/:id/play): it becomes
// pending, and what waited for it (skipped while it had not run) gets another chance. A
// build in any other state is a ValidationError: only a manual job can be played.
func (s *Service) PlayJob(ctx context.Context, projectID, id int64) (JobView, error) {
	b, err := s.store.Build(ctx, id)
	if err != nil {
		return JobView{}, err
	}
	if b.ProjectID != projectID {
		return JobView{}, ErrNotFound
	}
	if b.Status != StatusManual {
		return JobView{}, unplayable(b)
	}
	nb, err := s.store.PlayBuild(ctx, id, s.now(), actorName(ctx))
	if errors.Is(err, ErrConflict) {
		// Played, canceled or retried meanwhile: say what it is now.
		if b, err = s.store.Build(ctx, id); err == nil {
			err = unplayable(b)
		}
	}
	if err != nil {
		return JobView{}, err
	}
	s.bumpQueue(ctx)
	s.notifyPipelines(ctx, nb.PipelineID)
	s.audit(ctx, "job_played", jobTarget(id), nil)
	return s.view(ctx, nb), nil
}

func unplayable(b Build) error {
	return invalid("Unplayable Job: job %d is %s; only a manual job can be played", b.ID, b.Status)
}

// Ready reports whether Postgres answers.
func (s *Service) Ready(ctx context.Context) error { return s.store.Ping(ctx) }

// audit records an operator action that succeeded. A failure is logged, not returned: the
// action itself already happened and must be answered.
func (s *Service) audit(ctx context.Context, action, target string, detail map[string]any) {
	if err := s.audits.AddAudit(ctx, AuditEvent{At: s.now(), Actor: actorName(ctx), Action: action, Target: target, Detail: detail}); err != nil {
		s.log.WarnContext(ctx, "operator action not recorded", "action", action, "target", target, "error", err)
	}
}

func runnerTarget(id int64) string { return "runner:" + strconv.FormatInt(id, 10) }
func jobTarget(id int64) string    { return "job:" + strconv.FormatInt(id, 10) }

// RunnerAuditDetail is what the audit log keeps of a runner's settings.
func RunnerAuditDetail(r Runner) map[string]any {
	return map[string]any{"tag_list": r.Tags, "run_untagged": r.RunUntagged, "paused": r.Paused, "access_level": r.AccessLevel}
}
