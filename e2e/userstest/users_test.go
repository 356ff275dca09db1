package userstest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestUsersAPI: an administrator creates, lists, reads, changes, blocks and deletes users in
// GitLab's shapes; bad input is a 4xx with a message and writes nothing; only
// administrators reach these routes.
func TestUsersAPI(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	alice := createUser(t, inst, "alice", false)
	if alice.ID < 2 || alice.Username != "alice" || alice.Email != "alice@example.com" || alice.State != "active" ||
		alice.IsAdmin || alice.CreatedAt == nil || alice.WebURL != inst.URL+"/alice" {
		t.Fatalf("created user: %+v", alice)
	}
	root := createUser(t, inst, "root", true)
	if !root.IsAdmin {
		t.Fatalf("admin: true gave %+v", root)
	}

	for _, c := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"username taken, another case", map[string]any{"username": "ALICE", "name": "A", "email": "other@example.com"}, http.StatusConflict},
		{"email taken", map[string]any{"username": "alice2", "name": "A", "email": "Alice@Example.com"}, http.StatusConflict},
		{"no email", map[string]any{"username": "bob", "name": "B"}, http.StatusBadRequest},
		{"not an email", map[string]any{"username": "bob", "name": "B", "email": "bob"}, http.StatusBadRequest},
		{"bad username", map[string]any{"username": "-bob", "name": "B", "email": "bob@example.com"}, http.StatusBadRequest},
		{"reserved username", map[string]any{"username": "Admin", "name": "B", "email": "bob@example.com"}, http.StatusBadRequest},
		{"a password", map[string]any{"username": "bob", "name": "B", "email": "bob@example.com", "password": "hunter22"}, http.StatusBadRequest},
		{"unknown field", map[string]any{"username": "bob", "name": "B", "email": "bob@example.com", "nope": 1}, http.StatusBadRequest},
		{"newline in name", map[string]any{"username": "bob", "name": "B\nB", "email": "bob@example.com"}, http.StatusBadRequest},
	} {
		resp, body := inst.Do(t, "POST", "/api/v4/users", c.body)
		jobapitest.WantJSONError(t, resp, body, c.want)
	}
	var list []api.UserDetail
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/users", nil, &list)
	if len(list) != 2 || list[0].Username != "alice" || list[1].Username != "root" {
		t.Fatalf("users after the refused creations: %+v", list)
	}
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/users?username=ALICE", nil, &list)
	if len(list) != 1 || list[0].ID != alice.ID {
		t.Fatalf("?username=ALICE: %+v", list)
	}

	var changed api.UserDetail
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/users/%d", alice.ID), map[string]any{"name": "Alice Liddell"}, &changed)
	if changed.Name != "Alice Liddell" || changed.Email != alice.Email || changed.Username != "alice" {
		t.Fatalf("after PUT name: %+v", changed)
	}
	resp, body := inst.Do(t, "PUT", fmt.Sprintf("/api/v4/users/%d", alice.ID), map[string]any{"username": "root"})
	jobapitest.WantJSONError(t, resp, body, http.StatusConflict)

	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/block", alice.ID), nil, nil)
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/users?blocked=true", nil, &list)
	if len(list) != 1 || list[0].State != "blocked" || !list[0].Locked {
		t.Fatalf("?blocked=true after the block: %+v", list)
	}
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("/api/v4/users/%d/unblock", alice.ID), nil, nil)

	// A user's token, even with every scope a non-administrator may have, is no administrator.
	tok := createToken(t, inst, alice.ID, map[string]any{"name": "all", "scopes": []string{"api", "read_api", "create_runner", "manage_runner"}})
	resp, body = as(t, inst.URL, tok.Token, "GET", "/api/v4/users", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)
	resp, body = as(t, inst.URL, tok.Token, "POST", "/api/v4/users", map[string]any{"username": "mallory", "name": "M", "email": "m@example.com"})
	jobapitest.WantJSONError(t, resp, body, http.StatusForbidden)

	inst.MustDo(t, http.StatusNoContent, "DELETE", fmt.Sprintf("/api/v4/users/%d", alice.ID), nil, nil)
	resp, body = inst.Do(t, "GET", fmt.Sprintf("/api/v4/users/%d", alice.ID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusNotFound)
	// Deleting a user took its tokens.
	resp, body = as(t, inst.URL, tok.Token, "GET", "/api/v4/user", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM personal_access_tokens`); n != 0 {
		t.Errorf("%d tokens left after deleting their user", n)
	}
}

// TestTokensActAsTheirUser: a token created by an administrator works in PRIVATE-TOKEN and
// in Authorization: Bearer, GET /user names its user, and the admin token's GET /user is
// still GitLab's administrator. The secret is stored hashed: the table holds no secret.
func TestTokensActAsTheirUser(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	alice := createUser(t, inst, "alice", false)
	expiry := time.Now().UTC().AddDate(0, 0, 200).Format(time.DateOnly)
	tok := createToken(t, inst, alice.ID, map[string]any{"name": "laptop", "scopes": []string{"api"}, "expires_at": expiry})
	if tok.Name != "laptop" || !tok.Active || tok.Revoked || tok.UserID != alice.ID || tok.ExpiresAt == nil || *tok.ExpiresAt != expiry {
		t.Fatalf("created token: %+v", tok)
	}
	for name, send := range map[string]func(*testing.T, string, string, string, string, any) (*http.Response, []byte){
		"PRIVATE-TOKEN": as, "Bearer": bearer} {
		resp, body := send(t, inst.URL, tok.Token, "GET", "/api/v4/user", nil)
		jobapitest.WantStatus(t, resp, body, http.StatusOK)
		if u := decode[api.UserDetail](t, body); u.ID != alice.ID || u.Username != "alice" || u.Email != "alice@example.com" {
			t.Errorf("GET /user with %s: %s", name, body)
		}
	}
	var admin api.User
	inst.MustDo(t, http.StatusOK, "GET", "/api/v4/user", nil, &admin)
	if admin.ID != 1 || admin.Username != "admin" || !admin.IsAdmin {
		t.Errorf("GET /user with the admin token: %+v", admin)
	}

	var self api.PersonalAccessToken
	resp, body := as(t, inst.URL, tok.Token, "GET", "/api/v4/personal_access_tokens/self", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	self = decode[api.PersonalAccessToken](t, body)
	if self.ID != tok.ID || self.Token != "" || self.LastUsedAt == nil {
		t.Errorf("GET /personal_access_tokens/self: %s (want its id, no secret, last_used_at set)", body)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM personal_access_tokens WHERE token_hash = sha256(convert_to($1, 'UTF8'))`, tok.Token); n != 1 {
		t.Errorf("the stored digest is not the secret's SHA-256 (%d rows match)", n)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM personal_access_tokens WHERE strpos(encode(token_hash, 'escape'), $1) > 0`, tok.Token[6:]); n != 0 {
		t.Errorf("the secret is stored in clear")
	}

	// The user creates a token of its own, sees only its own tokens, not another's.
	resp, body = as(t, inst.URL, tok.Token, "POST", "/api/v4/user/personal_access_tokens", map[string]any{"name": "ci", "scopes": []string{"read_api"}})
	jobapitest.WantStatus(t, resp, body, http.StatusCreated)
	own := decode[api.PersonalAccessToken](t, body)
	bob := createUser(t, inst, "bob", false)
	bobs := createToken(t, inst, bob.ID, map[string]any{"name": "bob's", "scopes": []string{"api"}})
	resp, body = as(t, inst.URL, tok.Token, "GET", "/api/v4/personal_access_tokens", nil)
	jobapitest.WantStatus(t, resp, body, http.StatusOK)
	if l := decode[[]api.PersonalAccessToken](t, body); len(l) != 2 || l[0].ID != tok.ID || l[1].ID != own.ID {
		t.Errorf("alice's list: %s", body)
	}
	resp, body = as(t, inst.URL, tok.Token, "GET", fmt.Sprintf("/api/v4/personal_access_tokens?user_id=%d", bob.ID), nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
	for _, method := range []string{"GET", "DELETE"} {
		resp, body = as(t, inst.URL, tok.Token, method, fmt.Sprintf("/api/v4/personal_access_tokens/%d", bobs.ID), nil)
		jobapitest.WantJSONError(t, resp, body, http.StatusNotFound)
	}
	var all []api.PersonalAccessToken
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/personal_access_tokens?user_id=%d", bob.ID), nil, &all)
	if len(all) != 1 || all[0].ID != bobs.ID || !all[0].Active {
		t.Errorf("the admin's list of bob's tokens: %+v", all)
	}
	// The admin token is not a personal access token, and has no user to make one for.
	resp, body = inst.Do(t, "GET", "/api/v4/personal_access_tokens/self", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusNotFound)
	resp, body = inst.Do(t, "POST", "/api/v4/user/personal_access_tokens", map[string]any{"name": "x", "scopes": []string{"api"}})
	jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest)

	for _, c := range []struct {
		name string
		body map[string]any
	}{
		{"no scopes", map[string]any{"name": "x"}},
		{"empty scopes", map[string]any{"name": "x", "scopes": []string{}}},
		{"unknown scope", map[string]any{"name": "x", "scopes": []string{"sudo"}}},
		{"admin_mode for a non-admin", map[string]any{"name": "x", "scopes": []string{"api", "admin_mode"}}},
		{"no name", map[string]any{"scopes": []string{"api"}}},
		{"expiry in the past", map[string]any{"name": "x", "scopes": []string{"api"}, "expires_at": "2001-01-01"}},
		{"expiry not a date", map[string]any{"name": "x", "scopes": []string{"api"}, "expires_at": "soon"}},
	} {
		resp, body := inst.Do(t, "POST", fmt.Sprintf("/api/v4/users/%d/personal_access_tokens", alice.ID), c.body)
		if msg := jobapitest.WantJSONError(t, resp, body, http.StatusBadRequest); msg == "" {
			t.Errorf("%s: no message", c.name)
		}
	}
	resp, body = inst.Do(t, "POST", "/api/v4/users/999999/personal_access_tokens", map[string]any{"name": "x", "scopes": []string{"api"}})
	jobapitest.WantJSONError(t, resp, body, http.StatusNotFound)
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM personal_access_tokens`); n != 3 {
		t.Errorf("%d tokens after the refused creations, want 3", n)
	}
	for _, bad := range []string{"glpat-not-a-token", "Bearer-less", strings.Repeat("x", 5000)} {
		resp, body := as(t, inst.URL, bad, "GET", "/api/v4/user", nil)
		jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
	}
	resp, body = jobapitest.Send(t, inst.URL, "GET", "/api/v4/user", nil)
	jobapitest.WantJSONError(t, resp, body, http.StatusUnauthorized)
}
