package listings

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// PipelineQuery is GitLab's GET /projects/:id/pipelines query; zero fields filter nothing.
type PipelineQuery struct {
	// Scope: running, pending, finished (success, failed, canceled, skipped), or branches
	// and tags: the latest pipeline of each branch or tag ref.
	Scope  string
	Status string // one of GitLab's pipeline statuses
	// Ref: a branch or tag name; a tag pipeline (refs/tags/v1) matches its name too.
	Ref           string
	SHA           string
	Source        string
	UpdatedAfter  *time.Time
	UpdatedBefore *time.Time
	// OrderBy: id (default), status, ref, updated_at, user_id (jobapi has no pipeline
	// users: by id). Sort: desc (default) or asc.
	OrderBy string
	Sort    string
}

// GitLab's values of the filters (its API answers 400 for others).
var (
	PipelineScopes         = []string{"running", "pending", "finished", "branches", "tags"}
	PipelineOrders         = []string{"id", "status", "ref", "updated_at", "user_id"}
	PipelineSorts          = []string{"asc", "desc"}
	GitLabPipelineStatuses = []string{"created", "waiting_for_resource", "preparing", "waiting_for_callback", "pending",
		"running", "success", "failed", "canceling", "canceled", "skipped", "manual", "scheduled"}
	GitLabPipelineSources = []string{"push", "web", "trigger", "schedule", "api", "external", "pipeline", "chat",
		"webide", "merge_request_event", "external_pull_request_event", "parent_pipeline", "ondemand_dast_scan",
		"ondemand_dast_validation", "security_orchestration_policy", "container_registry_push", "duo_workflow",
		"pipeline_execution_policy_schedule", "unknown"}
)

// finishedPipelineStatuses are GitLab's scope=finished.
var finishedPipelineStatuses = []string{builds.PipelineSuccess, builds.PipelineFailed, builds.PipelineCanceled, "skipped"}

// Check refuses a value GitLab does not know, naming the parameter as GitLab's 400 does.
func (f PipelineQuery) Check() error {
	for _, c := range []struct {
		name, value string
		values      []string
	}{
		{"scope", f.Scope, PipelineScopes},
		{"status", f.Status, GitLabPipelineStatuses},
		{"source", f.Source, GitLabPipelineSources},
		{"order_by", f.OrderBy, PipelineOrders},
		{"sort", f.Sort, PipelineSorts},
	} {
		if c.value != "" && !slices.Contains(c.values, c.value) {
			return invalid("%s does not have a valid value: %.40q is not one of %s", c.name, c.value, strings.Join(c.values, ", "))
		}
	}
	if f.Ref != "" && len(f.Ref) > builds.MaxNameLength {
		return invalid("ref is longer than %d characters", builds.MaxNameLength)
	}
	if f.SHA != "" && len(f.SHA) > 64 {
		return invalid("sha is longer than 64 characters")
	}
	return nil
}

// Statuses are the pipeline statuses Scope and Status each allow (nil: any).
func (f PipelineQuery) Statuses() (scope []string, status []string) {
	switch f.Scope {
	case "running", "pending":
		scope = []string{f.Scope}
	case "finished":
		scope = finishedPipelineStatuses
	}
	if f.Status != "" {
		status = []string{f.Status}
	}
	return scope, status
}

// RefCandidates are the stored refs Ref matches: a name is a branch (as given or
// refs/heads/…) or a tag (refs/tags/…); a full name matches itself (and a branch its
// name).
func RefCandidates(ref string) []string {
	switch {
	case ref == "":
		return nil
	case strings.HasPrefix(ref, "refs/heads/"):
		return []string{ref, strings.TrimPrefix(ref, "refs/heads/")}
	case strings.HasPrefix(ref, "refs/tags/"):
		return []string{ref}
	}
	return []string{ref, "refs/heads/" + ref, "refs/tags/" + ref}
}

// ProjectPipelines lists a project's pipelines by f, a page of them without their builds, and how
// many match. A *ValidationError for a filter GitLab would refuse.
func (s *Service) ProjectPipelines(ctx context.Context, projectID int64, f PipelineQuery, pg builds.Page) ([]builds.Pipeline, int, error) {
	if err := f.Check(); err != nil {
		return nil, 0, err
	}
	return s.store.ProjectPipelines(ctx, projectID, f, pg)
}

// LatestPipeline is the newest pipeline of ref ("": the project's default branch; main for
// an implicit project) at sha (any commit when ""), with its builds; child pipelines are
// not counted, as in GitLab. ErrNotFound when the ref has none.
func (s *Service) LatestPipeline(ctx context.Context, projectID int64, ref, sha string) (builds.Pipeline, error) {
	if ref == "" {
		ref = "main"
		p, err := s.store.Project(ctx, projectID)
		switch {
		case err == nil:
			ref = p.DefaultBranch
		case !errors.Is(err, builds.ErrNotFound):
			return builds.Pipeline{}, err
		}
	} else if len(ref) > builds.MaxNameLength {
		return builds.Pipeline{}, invalid("ref is longer than %d characters", builds.MaxNameLength)
	}
	return s.store.LatestPipeline(ctx, projectID, RefCandidates(ref), sha)
}

// invalid is a *builds.ValidationError (400) with a formatted message.
func invalid(format string, args ...any) error {
	return &builds.ValidationError{Msg: fmt.Sprintf(format, args...)}
}
