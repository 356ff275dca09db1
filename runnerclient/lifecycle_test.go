package runnerclient

import (
	"context"
	"errors"
	"net/http"
	"testing"
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
