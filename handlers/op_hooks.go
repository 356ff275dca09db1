package handlers

// Project webhooks, GitLab's /projects/:id/hooks, and their delivery log
// (…/hooks/:hook_id/events): a maintainer's (manage_hooks in builds/access) or an
// administrator's token. A hook's token is written, never read.
// The forges' webhooks that jobapi receives are at …/hooks/inbound/{forge} (forge_webhooks.go).

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/hooks"
)

func hookView(hk hooks.Hook) api.ProjectHook {
	status, until := hk.Alert(time.Now())
	var disabledUntil *string
	if until != nil {
		v := until.UTC().Format(time.RFC3339Nano)
		disabledUntil = &v
	}
	return api.ProjectHook{ID: hk.ID, URL: hk.URL, Name: hk.Name, Description: hk.Description, ProjectID: hk.ProjectID,
		PushEvents: hk.PushEvents, PushEventsBranchFilter: hk.PushEventsBranchFilter, BranchFilterStrategy: hk.BranchFilterStrategy,
		TagPushEvents: hk.TagPushEvents, PipelineEvents: hk.PipelineEvents, JobEvents: hk.JobEvents,
		EnableSSLVerification: hk.EnableSSLVerification, TokenPresent: hk.TokenSet(), AlertStatus: status, DisabledUntil: disabledUntil,
		URLVariables: []any{}, CustomHeaders: []any{}, CreatedAt: hk.CreatedAt}
}

// hookRequest is GitLab's body of a hook's create and edit, JSON or form. The events jobapi
// has no source for are taken when false (clients send every flag) and refused when true.
type hookRequest struct {
	URL                    *string  `json:"url"`
	Name                   *string  `json:"name"`
	Description            *string  `json:"description"`
	Token                  *string  `json:"token"`
	PushEvents             *boolish `json:"push_events"`
	TagPushEvents          *boolish `json:"tag_push_events"`
	PipelineEvents         *boolish `json:"pipeline_events"`
	JobEvents              *boolish `json:"job_events"`
	PushEventsBranchFilter *string  `json:"push_events_branch_filter"`
	BranchFilterStrategy   *string  `json:"branch_filter_strategy"`
	EnableSSLVerification  *boolish `json:"enable_ssl_verification"`
	// The id GitLab's PUT carries in its path; python-gitlab sends it in the body too.
	ID *ignoredID `json:"id"`

	IssuesEvents             *boolish `json:"issues_events"`
	ConfidentialIssuesEvents *boolish `json:"confidential_issues_events"`
	MergeRequestsEvents      *boolish `json:"merge_requests_events"`
	NoteEvents               *boolish `json:"note_events"`
	ConfidentialNoteEvents   *boolish `json:"confidential_note_events"`
	WikiPageEvents           *boolish `json:"wiki_page_events"`
	DeploymentEvents         *boolish `json:"deployment_events"`
	ReleasesEvents           *boolish `json:"releases_events"`
	FeatureFlagEvents        *boolish `json:"feature_flag_events"`
	EmojiEvents              *boolish `json:"emoji_events"`
	ResourceAccessTokenEvent *boolish `json:"resource_access_token_events"`
}

// ignoredID takes a number or a string of one and ignores it.
type ignoredID struct{}

func (*ignoredID) UnmarshalJSON([]byte) error { return nil }

func readHookRequest(r *http.Request) (hooks.Change, error) {
	var req hookRequest
	if err := decodeBody(r, &req); err != nil {
		return hooks.Change{}, err
	}
	for name, v := range map[string]*boolish{"issues_events": req.IssuesEvents, "confidential_issues_events": req.ConfidentialIssuesEvents,
		"merge_requests_events": req.MergeRequestsEvents, "note_events": req.NoteEvents, "confidential_note_events": req.ConfidentialNoteEvents,
		"wiki_page_events": req.WikiPageEvents, "deployment_events": req.DeploymentEvents, "releases_events": req.ReleasesEvents,
		"feature_flag_events": req.FeatureFlagEvents, "emoji_events": req.EmojiEvents, "resource_access_token_events": req.ResourceAccessTokenEvent} {
		if v != nil && bool(*v) {
			return hooks.Change{}, badRequest("%s: jobapi sends no such events (it has push, tag push, pipeline and job events)", name)
		}
	}
	flag := func(b *boolish) *bool {
		if b == nil {
			return nil
		}
		v := bool(*b)
		return &v
	}
	return hooks.Change{URL: req.URL, Name: req.Name, Description: req.Description, Token: req.Token,
		PushEvents: flag(req.PushEvents), TagPushEvents: flag(req.TagPushEvents), PipelineEvents: flag(req.PipelineEvents),
		JobEvents: flag(req.JobEvents), PushEventsBranchFilter: req.PushEventsBranchFilter,
		BranchFilterStrategy: req.BranchFilterStrategy, EnableSSLVerification: flag(req.EnableSSLVerification)}, nil
}

func (h *Handler) listHooks(w http.ResponseWriter, r *http.Request) error {
	return writeProjectPage(w, r, h.hooks.List, hookView)
}

func (h *Handler) createHook(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	c, err := readHookRequest(r)
	if err != nil {
		return err
	}
	if c.URL == nil {
		return badRequest("url is missing")
	}
	hk, err := h.hooks.Create(r.Context(), pid, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, hookView(hk))
	return nil
}

func (h *Handler) getHook(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "hook_id")
	if err != nil {
		return err
	}
	hk, err := h.hooks.Get(r.Context(), pid, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hookView(hk))
	return nil
}

func (h *Handler) updateHook(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "hook_id")
	if err != nil {
		return err
	}
	c, err := readHookRequest(r)
	if err != nil {
		return err
	}
	hk, err := h.hooks.Update(r.Context(), pid, id, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hookView(hk))
	return nil
}

func (h *Handler) deleteHook(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "hook_id")
	if err != nil {
		return err
	}
	if err := h.hooks.Delete(r.Context(), pid, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// hookTriggers are GitLab's names of an event in the log (its hook's trigger).
var hookTriggers = map[string]string{hooks.EventPush: "push_hooks", hooks.EventTagPush: "tag_push_hooks",
	hooks.EventPipeline: "pipeline_hooks", hooks.EventJob: "job_hooks", hooks.EventForgeStatus: "commit_status"}

func hookEventView(a hooks.LoggedAttempt) api.HookEvent {
	status := "internal error"
	if a.StatusCode != 0 {
		status = strconv.Itoa(a.StatusCode)
	}
	return api.HookEvent{ID: a.DeliveryID, URL: a.URL, Trigger: hookTriggers[a.Delivery.Event],
		RequestHeaders: hooks.LoggedHeaders(a.Delivery), RequestData: a.Delivery.Payload, ResponseBody: a.ResponseBody,
		ResponseStatus: status, ExecutionDuration: a.Duration.Seconds(), Attempt: a.Attempt.Attempt, Error: a.Error,
		State: a.Delivery.State, EventUUID: a.Delivery.UUID, StartedAt: a.StartedAt}
}

// listHookEvents is a hook's delivery log, every attempt, newest first.
func (h *Handler) listHookEvents(w http.ResponseWriter, r *http.Request) error {
	hookID, err := pathID(r, "hook_id")
	if err != nil {
		return err
	}
	list := func(ctx context.Context, pid int64, pg builds.Page) ([]hooks.LoggedAttempt, int, error) {
		return h.hooks.Attempts(ctx, pid, hookID, pg)
	}
	return writeProjectPage(w, r, list, hookEventView)
}

// testHook sends one delivery of the trigger's kind now (GitLab's test of a hook): 201
// when the receiver answered 2xx, else 422 with what happened; either way the attempt is in
// the hook's log.
func (h *Handler) testHook(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "hook_id")
	if err != nil {
		return err
	}
	a, err := h.hooks.Test(r.Context(), pid, id, chi.URLParam(r, "trigger"))
	if err != nil {
		return err
	}
	if a.StatusCode < 200 || a.StatusCode > 299 {
		return &httpError{code: http.StatusUnprocessableEntity, msg: "Hook execution failed: " + a.Error}
	}
	writeJSON(w, http.StatusCreated, api.Error{Message: "201 Created"})
	return nil
}

// hookRoutes are the project webhook routes of the operator API (PRIVATE-TOKEN).
func (h *Handler) hookRoutes(r chi.Router) {
	r = r.With(h.can(access.ManageHooks), h.needHooks)
	r.Get("/projects/{project_id}/hooks", h.wrap(h.listHooks))
	r.Post("/projects/{project_id}/hooks", h.wrap(h.createHook))
	r.Get("/projects/{project_id}/hooks/{hook_id}", h.wrap(h.getHook))
	r.Put("/projects/{project_id}/hooks/{hook_id}", h.wrap(h.updateHook))
	r.Delete("/projects/{project_id}/hooks/{hook_id}", h.wrap(h.deleteHook))
	r.Get("/projects/{project_id}/hooks/{hook_id}/events", h.wrap(h.listHookEvents))
	r.Post("/projects/{project_id}/hooks/{hook_id}/test/{trigger}", h.wrap(h.testHook))
}

// needHooks answers 501 on a server wired without hooks.
func (h *Handler) needHooks(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.hooks == nil {
			writeError(w, http.StatusNotImplemented, "501 Not Implemented - this server sends no webhooks")
			return
		}
		next.ServeHTTP(w, r)
	})
}
