package runnerclient

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// The life-cycle calls put on the wire what network/gitlab.go does: method, path, the
// token in the body and the RUNNER-TOKEN header, the status each accepts.
func TestLifecycleWire(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		code       int
		reply      string
		call       func(c *Client) error
		method     string
		path       string
		body       map[string]any // fields that must be present with these values
		authHeader [2]string
	}{
		{"register", http.StatusCreated, `{"id":5,"token":"glrt-new-token-123456","token_expires_at":null}`,
			func(c *Client) error {
				res, err := c.Register(ctx, "reg-token", RegisterParameters{Description: "d", Tags: "a,b", RunUntagged: true})
				if err == nil && (res.ID != 5 || res.Token != "glrt-new-token-123456" || !res.TokenExpiresAt.IsZero()) {
					t.Errorf("register result %+v", res)
				}
				return err
			},
			"POST", "/api/v4/runners",
			map[string]any{"token": "reg-token", "description": "d", "tag_list": "a,b", "run_untagged": true, "paused": false, "locked": false},
			[2]string{"Runner-Token", "reg-token"}},
		{"unregister", http.StatusNoContent, ``, func(c *Client) error { return c.Unregister(ctx) },
			"DELETE", "/api/v4/runners", map[string]any{"token": testRunnerToken}, [2]string{"Runner-Token", testRunnerToken}},
		{"unregister manager", http.StatusNoContent, ``, func(c *Client) error { return c.UnregisterManager(ctx) },
			"DELETE", "/api/v4/runners/managers", map[string]any{"token": testRunnerToken, "system_id": "s_wire"},
			[2]string{"Runner-Token", testRunnerToken}},
		{"reset token", http.StatusCreated, `{"token":"glrt-reset-token-12345","token_expires_at":null}`,
			func(c *Client) error {
				_, err := c.ResetToken(ctx)
				if err == nil && c.Token != "glrt-reset-token-12345" {
					t.Errorf("token after reset %q", c.Token)
				}
				return err
			},
			"POST", "/api/v4/runners/reset_authentication_token", map[string]any{"token": testRunnerToken}, [2]string{}},
		{"reset token with PAT", http.StatusCreated, `{"token":"glrt-reset-token-12345","token_expires_at":null}`,
			func(c *Client) error { _, err := c.ResetTokenWithPAT(ctx, 7, "pat"); return err },
			"POST", "/api/v4/runners/7/reset_authentication_token", nil, [2]string{"Private-Token", "pat"}},
	} {
		srv, rec := recordingServer(t, tc.code, map[string]string{"Content-Type": "application/json"}, tc.reply)
		c := New(srv.URL, testRunnerToken, "s_wire")
		if err := tc.call(c); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		got := rec.last(t)
		if got.method != tc.method || got.path != tc.path {
			t.Errorf("%s: %s %s, want %s %s", tc.name, got.method, got.path, tc.method, tc.path)
		}
		if tc.authHeader[0] != "" && got.header.Get(tc.authHeader[0]) != tc.authHeader[1] {
			t.Errorf("%s: header %s = %q, want %q", tc.name, tc.authHeader[0], got.header.Get(tc.authHeader[0]), tc.authHeader[1])
		}
		if tc.body != nil {
			body := got.json(t)
			for k, v := range tc.body {
				if body[k] != v {
					t.Errorf("%s: body %s = %v, want %v", tc.name, k, body[k], v)
				}
			}
		} else if string(got.body) != "null" {
			t.Errorf("%s: body %q, want null (the runner sends no request object)", tc.name, got.body)
		}

		// Any other status is an error carrying it.
		srv, _ = recordingServer(t, http.StatusForbidden, map[string]string{"Content-Type": "application/json"}, `{"message":"403 Forbidden"}`)
		err := tc.call(New(srv.URL, testRunnerToken, "s_wire"))
		var se *StatusError
		if !errors.As(err, &se) || se.Code != http.StatusForbidden {
			t.Errorf("%s on 403: %v, want a StatusError", tc.name, err)
		}
	}
}

// The commands choose their calls by the token's prefix, as gitlab-runner v17.9's do: only
// glrt- is a "created runner" token (glrtr-, GitLab's prefix for runners registered with a
// registration token, is not), and the token reset falls due at 75 % of the lifetime.
func TestLifecycleCommandsChoose(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		token      string
		created    bool
		unregister string
	}{
		{"glrt-created-token-123456", true, "/api/v4/runners/managers"},
		{"glrtr-registered-token-1234", false, "/api/v4/runners"},
		{"GR1348941legacytoken12345", false, "/api/v4/runners"},
	} {
		if got := TokenIsCreatedRunnerToken(tc.token); got != tc.created {
			t.Errorf("TokenIsCreatedRunnerToken(%.6s…) = %v", tc.token, got)
		}
		srv, rec := recordingServer(t, http.StatusNoContent, nil, "")
		if err := New(srv.URL, tc.token, "s_cmd").UnregisterCommand(ctx); err != nil {
			t.Errorf("unregister %.6s…: %v", tc.token, err)
		}
		if got := rec.last(t); got.method != "DELETE" || got.path != tc.unregister {
			t.Errorf("unregister %.6s…: %s %s, want DELETE %s", tc.token, got.method, got.path, tc.unregister)
		}
	}

	// register with a glrt- token verifies it; with any other, registers with it.
	expires := "2030-01-02T03:04:05Z"
	srv, rec := recordingServer(t, http.StatusOK, map[string]string{"Content-Type": "application/json"},
		`{"id":9,"token":"glrt-created-token-123456","token_expires_at":"`+expires+`"}`)
	c := New(srv.URL, "", "s_cmd")
	if err := c.RegisterCommand(ctx, "glrt-created-token-123456", RegisterParameters{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t); got.path != "/api/v4/runners/verify" || c.ID != 9 || c.TokenExpiresAt.Format(time.RFC3339) != expires ||
		c.TokenObtainedAt.Nanosecond() != 0 {
		t.Errorf("register --token: %s; client id %d expires %v obtained %v", got.path, c.ID, c.TokenExpiresAt, c.TokenObtainedAt)
	}
	srv, rec = recordingServer(t, http.StatusCreated, map[string]string{"Content-Type": "application/json"},
		`{"id":10,"token":"glrtr-registered-token-1234","token_expires_at":null}`)
	c = New(srv.URL, "", "s_cmd")
	if err := c.RegisterCommand(ctx, "registration-secret", RegisterParameters{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t); got.path != "/api/v4/runners" || c.ID != 10 || c.Token != "glrtr-registered-token-1234" || !c.TokenExpiresAt.IsZero() {
		t.Errorf("register --registration-token: %s; client %+v", got.path, c)
	}
	if _, ok := c.NextTokenReset(); ok {
		t.Error("a token without expiry has a reset scheduled")
	}
	c.TokenObtainedAt = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c.TokenExpiresAt = c.TokenObtainedAt.Add(8 * time.Hour)
	if at, ok := c.NextTokenReset(); !ok || !at.Equal(c.TokenObtainedAt.Add(6*time.Hour)) {
		t.Errorf("next reset %v, want 6 h (75 %% of 8 h) after obtaining", at)
	}
}
