package builds

import "context"

// A runner's life as gitlab-runner drives it (unregister, unregister one manager, reset its
// token) and as an operator does (delete, reset). Each forgets what this replica cached about
// the runner and bumps the queue version, so that no idle poll is answered from an entry
// older than the change; other replicas stop accepting an old token within RunnerCacheTTL.

// UnregisterRunner deletes the runner whose token is presented (gitlab-runner unregister).
func (s *Service) UnregisterRunner(ctx context.Context, token string) error {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return err
	}
	return s.DeleteRunner(ctx, r.ID, runnerTarget(r.ID))
}

// DeleteRunner removes runner id and its managers for actor. Its pending builds stay for
// other runners; builds it holds keep their job tokens.
func (s *Service) DeleteRunner(ctx context.Context, id int64, actor string) error {
	if err := s.store.DeleteRunner(ctx, id); err != nil {
		return err
	}
	s.runners.forgetRunner(id)
	s.bumpQueue(ctx)
	s.audit(ctx, actor, "runner_deleted", runnerTarget(id), nil)
	return nil
}

// UnregisterManager removes one manager (system_id) of the runner whose token is presented
// (gitlab-runner unregister of a glrt- runner).
func (s *Service) UnregisterManager(ctx context.Context, token, systemID string) error {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return err
	}
	if err := s.store.DeleteManager(ctx, r.ID, systemID); err != nil {
		return err
	}
	s.runners.forgetManager(r.ID, systemID)
	s.audit(ctx, runnerTarget(r.ID), "runner_manager_deleted", runnerTarget(r.ID), map[string]any{"system_id": systemID})
	return nil
}

// ResetRunnerToken gives the runner whose token is presented a new token (gitlab-runner
// reset-token); the old one stops working. The new token is returned once.
func (s *Service) ResetRunnerToken(ctx context.Context, token string) (Runner, string, error) {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return Runner{}, "", err
	}
	newToken, err := s.ResetRunnerTokenByID(ctx, r.ID, runnerTarget(r.ID))
	return r, newToken, err
}

// ResetRunnerTokenByID gives runner id a new token for actor; the old one stops working.
func (s *Service) ResetRunnerTokenByID(ctx context.Context, id int64, actor string) (string, error) {
	token := NewToken(RunnerTokenPrefix)
	if err := s.store.SetRunnerToken(ctx, id, HashToken(token)); err != nil {
		return "", err
	}
	s.runners.forgetRunner(id)
	s.bumpQueue(ctx)
	s.audit(ctx, actor, "runner_token_reset", runnerTarget(id), nil)
	return token, nil
}
