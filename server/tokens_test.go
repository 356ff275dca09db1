package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/server"
)

// TestServeRefusesShortTokens: jobapi serve does not start with an admin token, or a set
// registration token, under 16 characters, and says which and why.
func TestServeRefusesShortTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, admin, registration, want string
	}{
		{"short admin token", "dev-admin-token", "", "JOBAPI_ADMIN_TOKEN: at least 16 characters, got 15"},
		{"one-letter admin token", "x", "", "JOBAPI_ADMIN_TOKEN: at least 16 characters, got 1"},
		{"short registration token", "a-long-enough-admin-token", "secret", "JOBAPI_RUNNER_REGISTRATION_TOKEN: at least 16 characters when set, got 6"},
	} {
		cfg, err := server.LoadConfig(func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		cfg.AdminToken, cfg.RunnerRegistrationToken = tc.admin, tc.registration
		cfg.DatabaseURL = "postgres://nobody@127.0.0.1:1/none" // refused before any connection
		s, err := server.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), server.Options{})
		if err == nil {
			_ = s.Close()
			t.Fatalf("%s: serve started", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
