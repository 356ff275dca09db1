package builds

import (
	"context"
	"errors"
	"strconv"
)

// maxAutoCancel bounds the pipelines one new pipeline cancels; alive pipelines of one ref
// are few, and the rest would wait for the next new pipeline.
const maxAutoCancel = 100

// ActorAutoCancel is who cancels redundant pipelines in the audit log.
const ActorAutoCancel = "auto-cancel"

// CancelRedundant applies GitLab's "auto-cancel redundant pipelines" (its default,
// on_new_commit: conservative) for pipeline p, just created from .gitlab-ci.yml: every
// older alive pipeline of the project on the same ref, for another commit, in which no
// started job is uninterruptible (interruptible: false, the default) is canceled whole,
// through the operator's cancel path. A pipeline without a sha is left alone: nothing
// says it is a new commit. It returns the ids canceled; p is created whatever happens
// here, so errors are logged, not returned.
func (s *Service) CancelRedundant(ctx context.Context, p Pipeline) []int64 {
	if p.SHA == "" {
		return nil
	}
	ids, err := s.store.RedundantPipelines(ctx, p.ProjectID, p.Ref, p.SHA, p.ID, maxAutoCancel)
	if err != nil {
		s.log.WarnContext(ctx, "redundant pipelines not looked up", "pipeline_id", p.ID, "error", err)
		return nil
	}
	var canceled []int64
	for _, id := range ids {
		if _, err := s.CancelPipeline(ctx, p.ProjectID, id, ActorAutoCancel); err != nil && !errors.Is(err, ErrNotFound) {
			s.log.WarnContext(ctx, "redundant pipeline not canceled", "pipeline_id", id,
				"by_pipeline", strconv.FormatInt(p.ID, 10), "error", err)
			continue
		}
		canceled = append(canceled, id)
	}
	return canceled
}
