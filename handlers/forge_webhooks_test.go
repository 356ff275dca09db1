package handlers

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A server built without the push service (as the contract's route walk builds one) answers
// its routes 501 with a message, never a panic: the degraded mode is named and checked.
func TestPushRoutesWithoutPushService(t *testing.T) {
	h := New(Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), AdminToken: "handler-test-admin-token"})
	for _, c := range []struct{ method, path, token string }{
		{"POST", "/api/v4/projects/1/hooks/inbound/github", ""},
		{"GET", "/api/v4/projects/1/push_settings", "handler-test-admin-token"},
		{"PUT", "/api/v4/projects/1/push_settings", "handler-test-admin-token"},
		{"POST", "/api/v4/projects/1/push_settings/poll", "handler-test-admin-token"},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(`{}`))
		if c.token != "" {
			req.Header.Set("PRIVATE-TOKEN", c.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotImplemented || !strings.Contains(rec.Body.String(), "receives no pushes") {
			t.Errorf("%s %s: %d %s; want 501 saying so", c.method, c.path, rec.Code, rec.Body)
		}
	}
}
