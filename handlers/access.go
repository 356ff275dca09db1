package handlers

// Who may act on a project or the instance: every project and instance route declares its
// action (h.can(access.RetryJob), h.can(access.ReadInstance))
// and this one middleware asks builds/access for the decision, with the caller's membership
// read from the store on this request, so that a removed member is refused at once on every
// replica. A caller with no access to the project gets 404, as from GitLab, so that a
// project's existence does not leak; a member below the role, 403.

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/schedules"
	"github.com/jobapi/jobapi/gitref"
)

type levelKey struct{}

// callerLevel is the caller's level on the request's project, as can found it (an admin's
// is Owner).
func callerLevel(ctx context.Context) access.Level {
	l, _ := ctx.Value(levelKey{}).(access.Level)
	return l
}

// can guards a route with action. On a project route (a {project_id} in its path) it reads
// the caller's membership of that project; elsewhere the action is the instance's. Actions
// under the protected-ref rule also check the ref of the route's job or pipeline.
func (h *Handler) can(action access.Action) func(http.Handler) http.Handler {
	access.RuleOf(action) // an action without a row fails when routes are built
	return h.canBy(func(*http.Request, builds.Actor) access.Action { return action })
}

// canBy is can for a route whose action depends on the request: pick names it from the
// request and its caller (every action it may name must have a row in access.Table).
func (h *Handler) canBy(pick func(*http.Request, builds.Actor) access.Action) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return h.wrap(func(w http.ResponseWriter, r *http.Request) error {
			a, ok := builds.ActorFrom(r.Context())
			if !ok {
				return &httpError{code: http.StatusUnauthorized, msg: "401 Unauthorized"}
			}
			action := pick(r, a)
			rule := access.RuleOf(action)
			var pid int64
			if chi.URLParam(r, "project_id") != "" {
				var err error
				if pid, err = projectID(r); err != nil {
					return err
				}
			}
			d, level, err := h.decide(r.Context(), a, pid, action)
			if err != nil {
				return err
			}
			if d == access.InsufficientScope {
				// GitLab's body and header, naming the scopes the action's row accepts.
				writeInsufficientScope(w, rule.TokenScopes())
				return nil
			}
			if err := decisionError(d, rule); err != nil {
				return err
			}
			ctx := context.WithValue(r.Context(), levelKey{}, level)
			if rule.RefRule && pid > 0 {
				ref, err := h.routeRef(ctx, r, pid)
				if err != nil {
					return err
				}
				if ref != "" {
					if err := h.mayRunOn(ctx, pid, ref); err != nil {
						return err
					}
				}
			}
			next.ServeHTTP(w, r.WithContext(ctx))
			return nil
		})
	}
}

// decide asks builds/access; without it (a handler built without members) only admins pass.
func (h *Handler) decide(ctx context.Context, a builds.Actor, pid int64, action access.Action) (access.Decision, access.Level, error) {
	if h.access == nil {
		level := access.NoAccess
		if a.Admin {
			level = access.Owner
		}
		return access.Decide(a, level, action), level, nil
	}
	return h.access.Check(ctx, a, pid, action)
}

// decisionError is how a refusal other than a token's scope is answered; an instance action
// refused says who may take it.
func decisionError(d access.Decision, rule access.Rule) error {
	switch {
	case d == access.Allow:
		return nil
	case d == access.NotFound:
		return &httpError{code: http.StatusNotFound, msg: "404 Project Not Found"}
	case rule.AdminOnly:
		return &httpError{code: http.StatusForbidden, msg: "403 Forbidden - this needs an administrator: the admin token, or an admin user's token with the admin_mode scope"}
	}
	return &httpError{code: http.StatusForbidden, msg: "403 Forbidden"}
}

// routeRef is the ref a job, pipeline or schedule route acts on ("" when the route names
// none, or it does not exist: the handler answers that).
func (h *Handler) routeRef(ctx context.Context, r *http.Request, pid int64) (string, error) {
	var ref string
	var err error
	switch {
	case chi.URLParam(r, "job_id") != "":
		id, perr := jobID(r)
		if perr != nil {
			return "", perr
		}
		var v builds.JobView
		v, err = h.svc.Job(ctx, pid, id)
		ref = v.Ref
	case chi.URLParam(r, "schedule_id") != "" && h.schedules != nil:
		// A schedule runs its pipelines on its ref without anyone's say: changing or
		// playing one is running on that ref.
		id, perr := pathID(r, "schedule_id")
		if perr != nil {
			return "", perr
		}
		var s schedules.Schedule
		s, err = h.schedules.Get(ctx, pid, id)
		ref = s.Ref
	case chi.URLParam(r, "pipeline_id") != "":
		id, perr := pathID(r, "pipeline_id")
		if perr != nil {
			return "", perr
		}
		var p builds.Pipeline
		p, err = h.svc.Pipeline(ctx, pid, id)
		ref = p.Ref
	}
	if errors.Is(err, builds.ErrNotFound) {
		return "", nil
	}
	return ref, err
}

// mayRunOn applies GitLab's protected-ref rule: on a protected branch or tag, only those it
// lets push or merge (create, for a tag) may run, retry, cancel or play pipelines.
func (h *Handler) mayRunOn(ctx context.Context, pid int64, ref string) error {
	a, _ := builds.ActorFrom(ctx)
	if a.Admin || h.access == nil {
		return nil
	}
	ok, err := h.access.MayRunOn(ctx, a, callerLevel(ctx), pid, ref)
	if err != nil {
		return err
	}
	if !ok {
		name, _ := gitref.Split(ref)
		return &httpError{code: http.StatusForbidden, msg: "403 Forbidden - " + name +
			" is protected: only members allowed to push or merge to it may run, retry, cancel or play its pipelines"}
	}
	return nil
}

// removalAction is the action of DELETE /projects/:id/members/:user_id: a user's own
// membership is its to end (GitLab's "leave project"), anyone else's a maintainer's.
func removalAction(r *http.Request, a builds.Actor) access.Action {
	if a.Kind == builds.ActorUser && a.UserID != 0 && chi.URLParam(r, "user_id") == strconv.FormatInt(a.UserID, 10) {
		return access.LeaveProject
	}
	return access.ManageMembers
}
