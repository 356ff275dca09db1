package builds

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
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
var finishedPipelineStatuses = []string{PipelineSuccess, PipelineFailed, PipelineCanceled, "skipped"}

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
	if f.Ref != "" && len(f.Ref) > MaxNameLength {
		return invalid("ref is longer than %d characters", MaxNameLength)
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
func (s *Service) ProjectPipelines(ctx context.Context, projectID int64, f PipelineQuery, pg Page) ([]Pipeline, int, error) {
	if err := f.Check(); err != nil {
		return nil, 0, err
	}
	return s.store.ProjectPipelines(ctx, projectID, f, pg)
}

// LatestPipeline is the newest pipeline of ref ("": the project's default branch; main for
// an implicit project) at sha (any commit when ""), with its builds; child pipelines are
// not counted, as in GitLab. ErrNotFound when the ref has none.
func (s *Service) LatestPipeline(ctx context.Context, projectID int64, ref, sha string) (Pipeline, error) {
	if ref == "" {
		ref = "main"
		if s.projects != nil {
			p, err := s.projects.Project(ctx, projectID)
			switch {
			case err == nil:
				ref = p.DefaultBranch
			case !errors.Is(err, ErrNotFound):
				return Pipeline{}, err
			}
		}
	} else if len(ref) > MaxNameLength {
		return Pipeline{}, invalid("ref is longer than %d characters", MaxNameLength)
	}
	return s.store.LatestPipeline(ctx, projectID, RefCandidates(ref), sha)
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
