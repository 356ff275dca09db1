package contract_test

import (
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobapi/jobapi/handlers"
)

// TestRoutesMatchSpec walks the router handlers.New builds and compares it with the paths of
// openapi.yaml, both ways, so that code and document cannot drift apart.
func TestRoutesMatchSpec(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	h := handlers.New(handlers.Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("handlers.New returned %T, not a chi.Routes", h)
	}

	served := map[string]bool{}
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// chi's catch-all takes the rest of the path; OpenAPI 3.0 has no such parameter, so
		// the document names it {artifact_path}, the routes that have one: a file of an archive.
		route = strings.Replace(route, "/artifacts/*", "/artifacts/{artifact_path}", 1)
		route = strings.Replace(route, "/raw/*", "/raw/{artifact_path}", 1)
		served[operationKey(method, route)] = true
		return nil
	})
	if err != nil {
		t.Fatalf("walk routes: %v", err)
	}
	if len(served) == 0 {
		t.Fatal("the router has no routes")
	}

	var undocumented []string
	for key := range served {
		method, path, _ := strings.Cut(key, " ")
		item := doc.Paths.Value(path)
		if item == nil || item.GetOperation(method) == nil {
			undocumented = append(undocumented, key)
			continue
		}
		if unimplemented(item.GetOperation(method)) {
			t.Errorf("%s is served now: remove %s from openapi.yaml and exercise it in the scenario", key, unimplementedKey)
		}
	}
	sort.Strings(undocumented)
	for _, key := range undocumented {
		t.Errorf("route %s (handlers/routes.go) has no operation in openapi.yaml", key)
	}

	var unserved []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := operationKey(method, path)
			if served[key] {
				continue
			}
			if unimplemented(op) {
				t.Logf("specified, not served yet: %s", key)
				continue
			}
			unserved = append(unserved, key)
		}
	}
	sort.Strings(unserved)
	for _, key := range unserved {
		t.Errorf("openapi.yaml describes %s, which handlers/routes.go does not serve (mark it %s: true if it is planned)", key, unimplementedKey)
	}
}
