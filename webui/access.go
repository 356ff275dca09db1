package webui

// Who may see and do what in the web UI: the same decisions as the API's (builds/access),
// made for the signed-in user. Each page and form declares its action in routes (u.can),
// which refuses it whatever the page showed (404 for a project the user has no access to,
// 403 for a role too low); pages then show only the actions the user's role and the ref's
// protection allow (u.allowed).

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/gitref"
)

// Permissions decides what the signed-in user may do: builds/access's Service.
type Permissions interface {
	// Check decides an action on a project (0: an instance action) for the actor, reading
	// its membership now, and returns the actor's level on the project.
	Check(ctx context.Context, a builds.Actor, projectID int64, action access.Action) (access.Decision, access.Level, error)
	// MayRunOn applies the protected-ref rule.
	MayRunOn(ctx context.Context, a builds.Actor, level access.Level, projectID int64, ref string) (bool, error)
	// MemberProjects lists the projects a user is a member of.
	MemberProjects(ctx context.Context, userID int64, page builds.Page) ([]builds.Project, int, error)
}

// actorOf is the signed-in caller, as requireSession resolved the session; outside a
// session, no one (who may do nothing).
func actorOf(r *http.Request) builds.Actor {
	a, _ := builds.ActorFrom(r.Context())
	return a
}

type levelKey struct{}

// can guards a page or form with action: on a project's path, the signed-in user's
// membership of it decides; elsewhere, the action is the instance's. An action under the
// protected-ref rule also checks the ref of the path's job or pipeline.
func (u *UI) can(action access.Action) func(http.Handler) http.Handler {
	rule := access.RuleOf(action)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a := actorOf(r)
			var pid int64
			if chi.URLParam(r, "project_id") != "" {
				var err error
				if pid, err = pathInt(r, "project_id"); err != nil {
					u.fail(w, r, err)
					return
				}
			}
			d, level, err := u.decide(r.Context(), a, pid, action)
			if err != nil {
				u.fail(w, r, err)
				return
			}
			switch d {
			case access.Allow:
			case access.NotFound:
				u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("There is no project %d, or you are not a member of it.", pid))
				return
			default:
				u.errorPage(w, r, http.StatusForbidden, forbiddenText(a, d, level, rule))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), levelKey{}, level))
			if rule.RefRule && pid > 0 {
				ref, err := u.pathRef(r, pid)
				if err != nil {
					u.fail(w, r, err)
					return
				}
				if ref != "" && !u.allowed(r, pid, action, ref) {
					name, _ := gitref.Split(ref)
					u.errorPage(w, r, http.StatusForbidden, name+" is protected: only members allowed to push or merge to it may run, retry, cancel or play its pipelines.")
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func forbiddenText(a builds.Actor, d access.Decision, level access.Level, rule access.Rule) string {
	switch {
	case d == access.InsufficientScope:
		return "You signed in with a read_api token: this session can only read. Sign in with an api token to act."
	case rule.AdminOnly:
		return "You are signed in as " + a.Username + ", who is not an administrator (in admin mode): this page is administrators'."
	}
	return fmt.Sprintf("Your role on this project (%s) may not %s: that needs %s or above.", level, rule.Covers, rule.Min)
}

func (u *UI) decide(ctx context.Context, a builds.Actor, pid int64, action access.Action) (access.Decision, access.Level, error) {
	if u.perms == nil {
		level := access.NoAccess
		if a.Admin {
			level = access.Owner
		}
		return access.Decide(a, level, action), level, nil
	}
	return u.perms.Check(ctx, a, pid, action)
}

// pathRef is the ref of the path's job, pipeline or schedule ("" when none exists: the
// page says so).
func (u *UI) pathRef(r *http.Request, pid int64) (string, error) {
	if chi.URLParam(r, "schedule_id") != "" && u.schedules != nil {
		id, err := pathInt(r, "schedule_id")
		if err != nil {
			return "", err
		}
		s, err := u.schedules.Get(r.Context(), pid, id)
		return s.Ref, ignoreNotFound(err)
	}
	if chi.URLParam(r, "job_id") != "" {
		id, err := pathInt(r, "job_id")
		if err != nil {
			return "", err
		}
		v, err := u.svc.Job(r.Context(), pid, id)
		return v.Ref, ignoreNotFound(err)
	}
	if chi.URLParam(r, "pipeline_id") != "" {
		id, err := pathInt(r, "pipeline_id")
		if err != nil {
			return "", err
		}
		p, err := u.svc.Pipeline(r.Context(), pid, id)
		return p.Ref, ignoreNotFound(err)
	}
	return "", nil
}

func ignoreNotFound(err error) error {
	if errors.Is(err, builds.ErrNotFound) {
		return nil
	}
	return err
}

// allowed reports whether the signed-in user may take action on the request's project (on
// ref, when the action is under the protected-ref rule and ref is not ""): what a page
// shows. It reads the level can found for the page; a failed read of the ref's protection
// hides the action (the form would be refused the same way).
func (u *UI) allowed(r *http.Request, pid int64, action access.Action, ref string) bool {
	a := actorOf(r)
	level, _ := r.Context().Value(levelKey{}).(access.Level)
	if access.Decide(a, level, action) != access.Allow {
		return false
	}
	if !access.RuleOf(action).RefRule || ref == "" || a.Admin || u.perms == nil {
		return true
	}
	ok, err := u.perms.MayRunOn(r.Context(), a, level, pid, ref)
	if err != nil {
		u.log.WarnContext(r.Context(), "protected ref not read: its actions are hidden", "project_id", pid, "error", err)
		return false
	}
	return ok
}
