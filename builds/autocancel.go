package builds

import (
	"context"
	"errors"
	"strconv"
)

// maxAutoCancel bounds the pipelines one new pipeline cancels; alive pipelines of one ref
// are few, and the rest would wait for the next new pipeline.
const maxAutoCancel = 100

// Actors of the auto-cancels in the audit log.
const (
	ActorAutoCancel          = "auto-cancel"
	ActorAutoCancelOnFailure = "auto-cancel on job failure"
)

// CancelRedundant applies GitLab's "auto-cancel redundant pipelines" for pipeline p, just
// created from .gitlab-ci.yml: every older alive pipeline of the project on the same ref,
// for another commit, is canceled as its own workflow:auto_cancel:on_new_commit says:
// conservative (the default) cancels it whole, through the operator's cancel path, when no
// started job is uninterruptible (interruptible: false, the default); interruptible cancels
// its interruptible jobs only, whatever has started; none leaves it. A pipeline without a
// sha is left alone: nothing says it is a new commit. It returns the ids canceled (wholly
// or in part); p is created whatever happens here, so errors are logged, not returned.
func (s *Service) CancelRedundant(ctx context.Context, p Pipeline) []int64 {
	if p.SHA == "" {
		return nil
	}
	redundant, err := s.store.RedundantPipelines(ctx, p.ProjectID, p.Ref, p.SHA, p.ID, maxAutoCancel)
	if err != nil {
		s.log.WarnContext(ctx, "redundant pipelines not looked up", "pipeline_id", p.ID, "error", err)
		return nil
	}
	var canceled []int64
	for _, r := range redundant {
		var err error
		n := 1
		if r.OnNewCommit == AutoCancelInterruptible {
			n, err = s.cancelInterruptible(ctx, p.ProjectID, r.ID)
		} else {
			_, err = s.CancelPipeline(WithActor(ctx, systemActor(ActorAutoCancel)), p.ProjectID, r.ID)
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			s.log.WarnContext(ctx, "redundant pipeline not canceled", "pipeline_id", r.ID,
				"by_pipeline", strconv.FormatInt(p.ID, 10), "error", err)
			continue
		}
		if n > 0 {
			canceled = append(canceled, r.ID)
		}
	}
	return canceled
}

// cancelInterruptible cancels the interruptible jobs of pipeline id (and of its children),
// with what CancelPipeline does after the store's cancel, and returns how many.
func (s *Service) cancelInterruptible(ctx context.Context, projectID, id int64) (int, error) {
	p, n, err := s.store.CancelInterruptible(ctx, projectID, id, s.now(), ActorAutoCancel)
	if err != nil || n == 0 {
		return 0, err
	}
	s.afterCancel(WithActor(ctx, systemActor(ActorAutoCancel)), p)
	return n, nil
}

// cancelOnJobFailure cancels the pipeline of build b, which just failed for good in a
// pipeline with on_job_failure: all, once that finish is committed, through the operator's
// cancel path (jobs on runners learn it from their next update, as from a user's cancel).
// It is never the finish's own transaction: that holds the pipeline's lock, and cancelling
// takes the rows of builds that concurrent finishes hold before they queue on that lock.
// A failure here is logged; CancelFailedOnce, on every replica, is the net.
func (s *Service) cancelOnJobFailure(ctx context.Context, b Build) {
	ctx = WithActor(context.WithoutCancel(ctx), systemActor(ActorAutoCancelOnFailure)) // the runner that reported the failure may hang up
	if _, err := s.CancelPipeline(ctx, b.ProjectID, b.PipelineID); err != nil && !errors.Is(err, ErrNotFound) {
		s.log.WarnContext(ctx, "pipeline not canceled after a job failure; the pass will", "pipeline_id", b.PipelineID,
			"build_id", b.ID, "error", err)
	}
}

// CancelFailedOnce cancels up to limit alive pipelines with on_job_failure: all in which a
// job failed for good (FailedToCancel), and returns how many it canceled. Safe on every
// replica: a pipeline canceled twice at once is canceled once (the second finds nothing
// left), and one with nothing left to cancel is not listed.
func (s *Service) CancelFailedOnce(ctx context.Context, limit int) (int, error) {
	refs, err := s.store.FailedToCancel(ctx, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range refs {
		if _, err := s.CancelPipeline(WithActor(ctx, systemActor(ActorAutoCancelOnFailure)), r.ProjectID, r.ID); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return n, err
		}
		n++
	}
	return n, nil
}
