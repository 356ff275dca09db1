package server

import (
	"context"
	"log/slog"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/builds/triggers"
	"github.com/jobapi/jobapi/cipipeline"
)

// startsFromRepository are the services that create pipelines from the project's
// repository on their own: trigger tokens and pipeline schedules (and the schedules'
// worker, one per replica).
type startsFromRepository struct {
	triggers  *triggers.Service
	schedules *schedules.Service
	worker    *schedules.Worker
}

func newStartsFromRepository(creator *cipipeline.Creator, cfg Config, opts Options, d *domain, log *slog.Logger) startsFromRepository {
	fromRef := func(ctx context.Context, projectID int64, ref, source string, vars []builds.Variable, serverURL string) (builds.Pipeline, error) {
		return creator.FromRef(ctx, cipipeline.FromRef{ProjectID: projectID, Ref: ref, Source: source, Variables: vars, ServerURL: serverURL})
	}
	s := startsFromRepository{
		triggers: triggers.NewService(d.store, func(ctx context.Context, s triggers.Start) (builds.Pipeline, error) {
			return fromRef(ctx, s.ProjectID, s.Ref, s.Source, s.Variables, s.ServerURL)
		}, d.svc, opts.Now),
		schedules: schedules.NewService(d.store, func(ctx context.Context, s schedules.Start) (builds.Pipeline, error) {
			// No request: CI_SERVER_URL is JOBAPI_EXTERNAL_URL (the Creator's).
			return fromRef(ctx, s.ProjectID, s.Ref, s.Source, s.Variables, "")
		}, d.svc, opts.Now),
	}
	s.worker = &schedules.Worker{Service: s.schedules, Interval: cfg.MaintenanceInterval, Log: log}
	return s
}
