package handlers

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobapi/jobapi/builds"
)

// TestEveryProjectRouteDeclaresAnAction walks the router: every route of a project (a
// {project_id} in its path) answers a signed-in user who is no member of it 404, before
// any handler runs, so that a route added without h.can cannot slip through. The routes
// that take a project's own secret instead of a user's token (forges' webhooks, trigger
// tokens) are the exceptions, named here.
func TestEveryProjectRouteDeclaresAnAction(t *testing.T) {
	t.Parallel()
	h := New(Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	routes := h.(chi.Routes)
	tokenRoutes := regexp.MustCompile(`/hooks/inbound/|/trigger/pipeline$`)
	params := regexp.MustCompile(`\{[a-z_]+\}`)
	// A stranger with a web session's actor (no scopes to refuse first), known to the
	// authentication already, as the session middleware leaves it.
	stranger := builds.Actor{Kind: builds.ActorUser, UserID: 42, Username: "stranger"}
	checked := 0
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !strings.Contains(route, "{project_id}") || tokenRoutes.MatchString(route) {
			return nil
		}
		path := strings.ReplaceAll(params.ReplaceAllString(route, "1"), "*", "file.txt")
		req := httptest.NewRequest(method, path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(builds.WithActor(req.Context(), stranger))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusNotImplemented && strings.Contains(route, "/hooks"):
			// The hooks routes check their service first; without one they answer 501.
		case rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "Project Not Found"):
			t.Errorf("%s %s as a non-member: %d %s, want 404 Project Not Found (does the route declare h.can?)",
				method, route, rec.Code, rec.Body.String())
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 80 {
		t.Errorf("checked %d project routes: the walk is broken", checked)
	}
}

// TestEveryInstanceRouteDeclaresAnAction walks the router's instance routes (the operator
// API outside projects and the caller's own): each refuses a user who is no administrator
// (403, saying who may), a read_api token on a write (403 insufficient_scope), and lets an
// administrator through; the runners' routes also take a token with only the runner scope
// their row names, and refuse it elsewhere.
func TestEveryInstanceRouteDeclaresAnAction(t *testing.T) {
	t.Parallel()
	h := New(Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	instance := regexp.MustCompile(`^/api/v4/(user/runners|runners/\{runner_id\}|runners$|runners/all|admin/|features|users)`)
	// gitlab-runner's own calls, with a runner or registration token.
	runnerProtocol := map[string]bool{"POST /api/v4/runners": true, "DELETE /api/v4/runners": true}
	params := regexp.MustCompile(`\{[a-z_]+\}`)
	user := func(admin bool, scopes ...string) builds.Actor {
		return builds.Actor{Kind: builds.ActorUser, UserID: 42, Username: "u", Admin: admin, Scopes: scopes}
	}
	serve := func(method, route string, a builds.Actor) *httptest.ResponseRecorder {
		path := params.ReplaceAllString(route, "1")
		req := httptest.NewRequest(method, path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(builds.WithActor(req.Context(), a))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	passed := func(rec *httptest.ResponseRecorder) bool {
		return rec.Code != http.StatusUnauthorized && rec.Code != http.StatusForbidden
	}
	checked := 0
	err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if !instance.MatchString(route) || runnerProtocol[method+" "+route] {
			return nil
		}
		checked++
		write := method != http.MethodGet && method != http.MethodHead
		runnerScope := ""
		switch {
		case method == http.MethodPost && route == "/api/v4/user/runners":
			runnerScope = "create_runner"
		case strings.HasPrefix(route, "/api/v4/runners"):
			runnerScope = "manage_runner"
		}
		cases := []struct {
			name  string
			actor builds.Actor
			want  string // "pass", "admin" (403 needs an administrator), "scope" (403 insufficient_scope)
		}{
			{"developer's api token", user(false, "api"), "admin"},
			{"admin user's api token without admin_mode", user(false, "api"), "admin"},
			{"admin token", builds.Actor{Kind: builds.ActorAdminToken, Admin: true}, "pass"},
			{"admin user's api token", user(true, "api", "admin_mode"), "pass"},
			{"admin user's read_api token", user(true, "read_api", "admin_mode"), map[bool]string{true: "scope", false: "pass"}[write]},
			{"admin user's manage_runner token", user(true, "manage_runner", "admin_mode"), map[bool]string{true: "pass", false: "scope"}[runnerScope == "manage_runner"]},
			{"admin user's create_runner token", user(true, "create_runner", "admin_mode"), map[bool]string{true: "pass", false: "scope"}[runnerScope == "create_runner"]},
		}
		for _, c := range cases {
			rec := serve(method, route, c.actor)
			body := rec.Body.String()
			var ok bool
			switch c.want {
			case "pass":
				ok = passed(rec)
			case "admin":
				ok = rec.Code == http.StatusForbidden && strings.Contains(body, "this needs an administrator")
			case "scope":
				ok = rec.Code == http.StatusForbidden && strings.Contains(body, `"error":"insufficient_scope"`) &&
					strings.Contains(rec.Header().Get("WWW-Authenticate"), `error="insufficient_scope"`)
			}
			if !ok {
				t.Errorf("%s %s, %s: %d %s, want %s", method, route, c.name, rec.Code, body, c.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Errorf("checked %d instance routes: the walk is broken", checked)
	}
}
