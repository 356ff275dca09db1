// Package auditlog reads the audit log of operator actions (the API's GET /admin/events,
// the web UI's history and a pipeline's history) and records the changes of feature flags,
// which live in their own backend outside every service. Recording an action is the core's
// (builds.Service.RecordAudit, with the actor and its clock), which every service calls
// after its action succeeded; this package asks it for that alone. builds never imports it.
package auditlog

import (
	"context"
	"strconv"

	"github.com/jobapi/jobapi/builds"
)

// Store reads the audit log (Postgres).
type Store interface {
	// Audit lists operator actions, newest first, and their total.
	Audit(ctx context.Context, p builds.Page) ([]builds.AuditEvent, int, error)
	// AuditOf lists the actions on one target ("pipeline:12"), oldest first: the history a
	// page of that object shows.
	AuditOf(ctx context.Context, target string, p builds.Page) ([]builds.AuditEvent, int, error)
}

// Builds is what the package asks of the core (a *builds.Service).
type Builds interface {
	RecordAudit(ctx context.Context, action, target string, detail map[string]any)
}

// Deps are what a Service is built from; both are required.
type Deps struct {
	Builds Builds
	Store  Store
}

// Service reads the audit log and records feature flag changes.
type Service struct {
	builds Builds
	store  Store
}

// New returns the service over d; it panics when a dependency is missing.
func New(d Deps) *Service {
	if d.Builds == nil || d.Store == nil {
		panic("auditlog.New: Builds and Store are required")
	}
	return &Service{builds: d.Builds, store: d.Store}
}

// Events lists operator actions, newest first.
func (s *Service) Events(ctx context.Context, p builds.Page) ([]builds.AuditEvent, int, error) {
	return s.store.Audit(ctx, p)
}

// PipelineHistory lists the actions on a pipeline (created, canceled, retried, with who did
// each), oldest first.
func (s *Service) PipelineHistory(ctx context.Context, id int64, p builds.Page) ([]builds.AuditEvent, int, error) {
	return s.store.AuditOf(ctx, "pipeline:"+strconv.FormatInt(id, 10), p)
}

// FeatureSet records that the context's actor changed a feature flag.
func (s *Service) FeatureSet(ctx context.Context, name string, detail map[string]any) {
	s.builds.RecordAudit(ctx, "feature_set", "feature:"+name, detail)
}

// FeatureDeleted records that the context's actor deleted a feature flag.
func (s *Service) FeatureDeleted(ctx context.Context, name string) {
	s.builds.RecordAudit(ctx, "feature_deleted", "feature:"+name, nil)
}
