package builds

import "context"

// What the concerns beside the core (builds/artifacts, builds/joblogs) ask of it: a
// project's build, a running job's token checked, an operator action recorded, a hint for
// live views (and, for the log archive, the live log: SealLog, DropLiveTail,
// LiveTraceRange, LiveTraceLines). They depend on the core; the core knows nothing of
// them.

// ProjectJob returns one build of a project; ErrNotFound when the project has no such build.
func (s *Service) ProjectJob(ctx context.Context, projectID, id int64) (Build, error) {
	return s.job(ctx, projectID, id)
}

// RunningJob checks a runner's job token for a call made while the job runs (an upload):
// a *JobForbiddenError (403) for a wrong token, and with Job-Status for a job no longer
// running.
func (s *Service) RunningJob(ctx context.Context, id int64, token string) (Build, error) {
	b, err := s.jobForToken(ctx, id, token)
	if err != nil {
		return Build{}, err
	}
	if b.Status != StatusRunning && b.Status != StatusCanceling {
		return Build{}, &JobForbiddenError{Cause: NotRunning, Status: b.Status}
	}
	return b, nil
}

// RecordAudit records an operator action that succeeded; a failure to record it is logged,
// not returned.
func (s *Service) RecordAudit(ctx context.Context, action, target string, detail map[string]any) {
	s.audit(ctx, action, target, detail)
}

// Changed records a hint for live views (see changed): the log archive tells them a log
// moved.
func (s *Service) Changed(c Change) { s.changed(c) }

// QueueChanged tells every runner to look in Postgres again: a concern queued a job (a
// resource group assigned after its process mode changed).
func (s *Service) QueueChanged(ctx context.Context) { s.bumpQueue(ctx) }
