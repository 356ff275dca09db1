package handlers

// Who is calling: the one middleware that resolves a request's credential (the admin token,
// a personal access token in PRIVATE-TOKEN or Authorization: Bearer) into the builds.Actor
// every handler, the audit log and the permission checks read (builds.ActorFrom), the
// scope check of personal access tokens, and the guards of the instance and project routes.

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/users"
)

// credential is the request's token: PRIVATE-TOKEN, else an Authorization: Bearer token
// (GitLab takes both for personal access tokens).
func credential(r *http.Request) string {
	if t := r.Header.Get("PRIVATE-TOKEN"); t != "" {
		return t
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	return ""
}

// resolve finds who token belongs to (users.Authenticator: the admin token or a personal
// access token, refused tokens counted against the guard's budgets).
func (h *Handler) resolve(r *http.Request, token string) (builds.Actor, error) {
	auth := users.Authenticator{Guard: h.admin, Users: h.users}
	a, err := auth.Resolve(r.Context(), clientAddr(r), token, "request "+RequestID(r.Context()))
	var throttled *users.ThrottledError
	if errors.As(err, &throttled) {
		scope := "token_failure"
		if throttled.PerUser {
			scope = "token_failure_user"
		}
		h.metrics.rateLimit.WithLabelValues(scope, "limited").Inc()
	}
	return a, err
}

// authenticate puts the caller in the request's context (builds.WithActor), or answers 401
// (429 past the failure budgets). A personal access token must also have a scope that
// allows the request (scopesFor), else 403 insufficient_scope. A request whose actor is
// resolved already passes on.
func (h *Handler) authenticate(next http.Handler) http.Handler {
	return h.identify(next, true)
}

// routeAccess authenticates the caller of a route that declares its action (h.can,
// access.go): the action's row says which scopes suffice, so it is h.can that checks them.
func (h *Handler) routeAccess(next http.Handler) http.Handler {
	return h.identify(next, false)
}

func (h *Handler) identify(next http.Handler, checkScopes bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := builds.ActorFrom(r.Context()); ok {
			next.ServeHTTP(w, r)
			return
		}
		token := credential(r)
		if token == "" {
			writeError(w, http.StatusUnauthorized, "401 Unauthorized - send a personal access token or the admin token in PRIVATE-TOKEN or Authorization: Bearer")
			return
		}
		a, err := h.resolve(r, token)
		var throttled *users.ThrottledError
		var refused *users.AuthError
		switch {
		case errors.As(err, &throttled):
			w.Header().Set("Retry-After", strconv.Itoa(max(int(throttled.RetryAfter.Seconds()+0.999), 1)))
			writeError(w, http.StatusTooManyRequests, "429 Too Many Requests - "+throttled.Error()+"; retry later")
			return
		case errors.As(err, &refused):
			writeRefused(w, refused)
			return
		case err != nil:
			h.fail(w, r, err)
			return
		}
		if checkScopes {
			if allowed := scopesFor(r); !scopeAllows(a, allowed) {
				writeInsufficientScope(w, allowed)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(builds.WithActor(r.Context(), a)))
	})
}

// writeRefused answers a refused token as GitLab does: 401 with invalid_token for a revoked
// or expired one (and WWW-Authenticate), 403 for a blocked user, a plain 401 otherwise.
func writeRefused(w http.ResponseWriter, e *users.AuthError) {
	switch e.Refusal {
	case users.Revoked, users.Expired:
		desc := "Token was revoked. You have to re-authorize from the user."
		if e.Refusal == users.Expired {
			desc = "Token has expired."
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="jobapi", error="invalid_token", error_description="`+desc+`"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token", "error_description": desc,
			"message": "401 Unauthorized - " + e.Error()})
	case users.Blocked:
		writeError(w, http.StatusForbidden, "403 Forbidden - Your account has been blocked.")
	default:
		writeError(w, http.StatusUnauthorized, "401 Unauthorized")
	}
}

// scopesFor lists the scopes of which a personal access token needs one for r, on a route
// that declares no action (the caller's own): those of a read or a write in access.Table.
func scopesFor(r *http.Request) []string {
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	return access.Rule{Write: !read}.TokenScopes()
}

func scopeAllows(a builds.Actor, allowed []string) bool {
	for _, s := range allowed {
		if a.HasScope(s) {
			return true
		}
	}
	return false
}

// writeInsufficientScope is GitLab's 403 for a token used beyond its scopes.
func writeInsufficientScope(w http.ResponseWriter, allowed []string) {
	const desc = "The request requires higher privileges than provided by the access token."
	scope := strings.Join(allowed, " ")
	w.Header().Set("WWW-Authenticate", `Bearer realm="jobapi", error="insufficient_scope", error_description="`+desc+`", scope="`+scope+`"`)
	writeJSON(w, http.StatusForbidden, api.ScopeError{Error: "insufficient_scope", ErrorDescription: desc, Scope: scope,
		Message: "403 Forbidden - insufficient_scope: the token needs one of the scopes " + scope})
}

// projectAccess authenticates the caller of a project's route; the route's own action
// (h.can, access.go) then decides, from the caller's membership of the project.
func (h *Handler) projectAccess(next http.Handler) http.Handler {
	return h.authenticate(next)
}
