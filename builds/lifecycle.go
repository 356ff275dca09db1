package builds

import (
	"context"
	"errors"
	"time"

	"github.com/jobapi/jobapi/secrettoken"
)

// A runner's life as gitlab-runner drives it (unregister, unregister one manager, reset its
// token) and as an operator deletes it (the rest of the operator's side is package
// builds/runners). Each forgets what this replica cached about the runner and bumps the
// queue version, so that no idle poll is answered from an entry older than the change;
// other replicas stop accepting an old token within RunnerCacheTTL.

// UnregisterRunner deletes the runner whose token is presented (gitlab-runner unregister
// of a runner registered with a registration token: DELETE /runners).
func (s *Service) UnregisterRunner(ctx context.Context, token string) error {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return err
	}
	return s.DeleteRunner(WithActor(ctx, runnerActor(r.ID)), r.ID)
}

// DeleteRunner removes runner id and its managers for actor. The builds its machines hold
// end in the same transaction (RunnerDeletion.Finish): the runner's next update or trace
// gets 403 with Job-Status failed, and the retry policy queues their next attempts. Its
// pending builds stay for other runners.
func (s *Service) DeleteRunner(ctx context.Context, id int64) error {
	res, err := s.store.DeleteRunner(ctx, RunnerDeletion{RunnerID: id, Actor: actorName(ctx), Now: s.now(), Policy: s.cfg.Policy})
	if err != nil {
		return err
	}
	s.runners.forgetRunner(id)
	ended := make([]int64, 0, len(res.Finished))
	for _, f := range res.Finished {
		s.forgetJob(f.Build.ID)
		ended = append(ended, f.Build.ID)
		// A waiting build's ack key would only expire; the sweeper reads Postgres anyway.
		if err := s.leases.Release(ctx, f.Build.ID); err != nil {
			s.log.WarnContext(ctx, "ack key of a build of a deleted runner not released", "build_id", f.Build.ID, "error", err)
		}
	}
	// The version bump also sends every runner's next poll to Postgres, so a cached entry
	// of this runner answers no idle poll; it names the runner, whose held requests wake.
	s.bumpRunner(ctx, id)
	for _, f := range res.Finished {
		s.notifyPipelines(ctx, f.Build.PipelineID)
	}
	detail := map[string]any(nil)
	if len(ended) > 0 {
		detail = map[string]any{"ended_builds": ended}
	}
	s.audit(ctx, "runner_deleted", runnerTarget(id), detail)
	return nil
}

// UnregisterManager removes one manager (system_id) of the runner whose token is presented
// (gitlab-runner unregister of a glrt- runner: DELETE /runners/managers). The runner stays,
// as in GitLab: other machines may use its token, and an operator created it.
func (s *Service) UnregisterManager(ctx context.Context, token, systemID string) error {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return err
	}
	if err := s.store.DeleteManager(ctx, r.ID, systemID); err != nil {
		return err
	}
	s.runners.forgetManager(r.ID, systemID)
	s.audit(WithActor(ctx, runnerActor(r.ID)), "runner_manager_deleted", runnerTarget(r.ID), map[string]any{"system_id": systemID})
	return nil
}

// ResetRunnerToken gives the runner whose token is presented a new token (gitlab-runner
// reset-token, and run's own rotation before expiry), shown once. The presented token keeps
// working for RunnerTokenRotationGrace, never past its own expiry: requests already under
// way with it still count, and a runner whose answer was lost can reset again with it.
func (s *Service) ResetRunnerToken(ctx context.Context, token string) (RunnerToken, error) {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return RunnerToken{}, err
	}
	now := s.now()
	issued := s.NewRunnerToken(r)
	rot := TokenRotation{RunnerID: r.ID, Presented: secrettoken.Hash(token), New: secrettoken.Hash(issued.Token),
		ExpiresAt: issued.ExpiresAt, Now: now}
	if s.cfg.RunnerTokenRotationGrace > 0 {
		until := now.Add(s.cfg.RunnerTokenRotationGrace).UTC().Truncate(time.Second)
		rot.PreviousUntil = &until
	}
	if err := s.store.RotateRunnerToken(ctx, rot); err != nil {
		if errors.Is(err, ErrNotFound) {
			// Replaced or expired since this replica read it.
			return RunnerToken{}, ErrRunnerForbidden
		}
		return RunnerToken{}, err
	}
	s.tokenChanged(WithActor(ctx, runnerActor(r.ID)), r.ID, issued, rot.PreviousUntil)
	return issued, nil
}

// tokenChanged forgets the runner's cached tokens, bumps the queue version and audits.
func (s *Service) tokenChanged(ctx context.Context, id int64, issued RunnerToken, previousUntil *time.Time) {
	s.RunnerChanged(ctx, id)
	detail := map[string]any{}
	if issued.ExpiresAt != nil {
		detail["token_expires_at"] = issued.ExpiresAt.Format(time.RFC3339)
	}
	if previousUntil != nil {
		detail["grace_until"] = previousUntil.Format(time.RFC3339)
	}
	s.audit(ctx, "runner_token_reset", runnerTarget(id), detail)
}
