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
