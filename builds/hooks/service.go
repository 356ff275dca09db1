package hooks

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/forgestatus"
)

// Test triggers, GitLab's names (POST /projects/:id/hooks/:hook_id/test/:trigger).
var testTriggers = []string{"push_events", "tag_push_events", "pipeline_events", "job_events"}

// Test sends one delivery of trigger's kind to a hook now, made from the project's newest
// pipeline (GitLab makes its test from the project's data too), once, without retries; the
// attempt is in the hook's log. A project without pipelines has nothing to send: a
// validation error, as GitLab answers "Ensure the project has CI pipelines".
func (s *Service) Test(ctx context.Context, projectID, hookID int64, trigger string) (Attempt, error) {
	h, err := s.store.Hook(ctx, projectID, hookID)
	if err != nil {
		return Attempt{}, err
	}
	known := false
	for _, t := range testTriggers {
		known = known || t == trigger
	}
	if !known {
		return Attempt{}, &builds.ValidationError{Msg: fmt.Sprintf("trigger does not have a valid value: %.40q is not one of push_events, tag_push_events, pipeline_events, job_events", trigger)}
	}
	out := s.sender.Outbox
	p, err := out.NewestPipeline(ctx, projectID)
	if errors.Is(err, builds.ErrNotFound) {
		return Attempt{}, &builds.ValidationError{Msg: "Ensure the project has CI pipelines."}
	}
	if err != nil {
		return Attempt{}, err
	}
	prj, err := out.Project(ctx, projectID)
	if err != nil {
		return Attempt{}, err
	}
	now := s.now()
	site := s.sender.Site
	var event string
	var payload any
	switch trigger {
	case "pipeline_events":
		event, payload = EventPipeline, site.pipelineEvent(p, prj, now)
	case "job_events":
		var last *builds.Build
		for i := range p.Builds {
			if !p.Builds[i].Bridge {
				last = &p.Builds[i]
			}
		}
		if last == nil {
			return Attempt{}, &builds.ValidationError{Msg: "Ensure the project has CI jobs."}
		}
		event, payload = EventJob, site.jobEvent(*last, p, prj, now)
	default:
		_, push := site.pushEvent(p, prj)
		event, push.ObjectKind, push.EventName = EventPush, "push", "push"
		if trigger == "tag_push_events" {
			event, push.ObjectKind, push.EventName = EventTagPush, "tag_push", "tag_push"
		}
		payload = push
	}
	d, err := delivery(projectID, h.ID, event, "", payload, now)
	if err != nil {
		return Attempt{}, err
	}
	d.Key = "test:" + d.UUID
	c, err := out.AddHookDelivery(ctx, d)
	if err != nil {
		return Attempt{}, err
	}
	return s.sender.deliver(ctx, c, true)
}

// ForgeStatus returns a project's forge status settings (builds.ErrNotFound: none set).
func (s *Service) ForgeStatus(ctx context.Context, projectID int64) (forgestatus.Settings, error) {
	return s.store.ForgeStatus(ctx, projectID)
}

// PutForgeStatus sets where a project's commit statuses go; the token stays unless c sets
// one. The forge's API may not be on the local network unless that is allowed.
func (s *Service) PutForgeStatus(ctx context.Context, projectID int64, c forgestatus.Change) (forgestatus.Settings, error) {
	st, err := s.store.ForgeStatus(ctx, projectID)
	if errors.Is(err, builds.ErrNotFound) {
		st, err = forgestatus.Settings{ProjectID: projectID, CreatedAt: s.now()}, nil
	}
	if err != nil {
		return forgestatus.Settings{}, err
	}
	if err := c.Apply(&st); err != nil {
		return forgestatus.Settings{}, err
	}
	if u, err := url.Parse(st.APIURL); err == nil && !s.allowLocal && localHost(u.Hostname()) {
		return forgestatus.Settings{}, &builds.ValidationError{Msg: "api_url is blocked: requests to the local network are not allowed (JOBAPI_HOOKS_ALLOW_LOCAL_NETWORK)"}
	}
	st.UpdatedAt = s.now()
	return s.store.PutForgeStatus(ctx, st)
}

// DeleteForgeStatus stops a project's commit statuses; those not yet sent are dropped.
func (s *Service) DeleteForgeStatus(ctx context.Context, projectID int64) error {
	return s.store.DeleteForgeStatus(ctx, projectID)
}
