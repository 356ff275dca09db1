package userstest_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// createUser makes a user as the admin token.
func createUser(t *testing.T, inst *jobapitest.Instance, username string, admin bool) api.UserDetail {
	t.Helper()
	var u api.UserDetail
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/users", map[string]any{"username": username,
		"name": "Name of " + username, "email": username + "@example.com", "admin": admin}, &u)
	return u
}

// createToken makes a personal access token of user id as the admin token.
func createToken(t *testing.T, inst *jobapitest.Instance, userID int64, body map[string]any) api.PersonalAccessToken {
	t.Helper()
	var tok api.PersonalAccessToken
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", userID), body, &tok)
	if len(tok.Token) < 20 || tok.Token[:6] != "glpat-" {
		t.Fatalf("created token %q: want the glpat- secret", tok.Token)
	}
	return tok
}

// as sends a request to base with token in PRIVATE-TOKEN.
func as(t *testing.T, base, token, method, path string, body any) (*http.Response, []byte) {
	t.Helper()
	return jobapitest.Send(t, base, method, path, body, "PRIVATE-TOKEN", token)
}

// bearer sends a request to base with token in Authorization: Bearer.
func bearer(t *testing.T, base, token, method, path string, body any) (*http.Response, []byte) {
	t.Helper()
	return jobapitest.Send(t, base, method, path, body, "Authorization", "Bearer "+token)
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// fromAddress is an HTTP client whose requests come from ip (127.0.0.0/8 is all loopback
// on Linux), so that a test plays several clients for the per-address budgets.
func fromAddress(ip string) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}).DialContext
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

func get(t *testing.T, c *http.Client, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("PRIVATE-TOKEN", token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}
