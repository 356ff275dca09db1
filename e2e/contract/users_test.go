package contract_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
)

// usersScenario creates a user and its tokens, acts with them (PRIVATE-TOKEN and Bearer,
// a scope refused), reads, rotates and revokes them, blocks, unblocks and deletes the user.
func usersScenario(t *testing.T, c *client) {
	t.Helper()
	var u api.UserDetail
	c.decode(&u, http.StatusCreated, "POST", "/api/v4/users", jsonBody(t, map[string]any{
		"username": "contract", "name": "Contract", "email": "contract@example.com"}), admin)
	c.do(http.StatusConflict, "POST", "/api/v4/users", jsonBody(t, map[string]any{
		"username": "CONTRACT", "name": "Again", "email": "again@example.com"}), admin)
	c.do(http.StatusBadRequest, "POST", "/api/v4/users", jsonBody(t, map[string]any{"username": "x", "nope": true}), admin, invalid)
	c.do(http.StatusOK, "GET", "/api/v4/users?search=contr", nil, admin)
	one := path("/api/v4/users/%d", u.ID)
	c.do(http.StatusOK, "GET", one, nil, admin)
	c.do(http.StatusOK, "PUT", one, jsonBody(t, map[string]any{"name": "Contract Two"}), admin)
	c.do(http.StatusNotFound, "GET", "/api/v4/users/999999", nil, admin)

	var tok, reader api.PersonalAccessToken
	c.decode(&tok, http.StatusCreated, "POST", path("/api/v4/users/%d/personal_access_tokens", u.ID),
		jsonBody(t, map[string]any{"name": "api", "scopes": []string{"api"}, "expires_at": time.Now().UTC().AddDate(0, 0, 100).Format(time.DateOnly)}), admin)
	c.do(http.StatusBadRequest, "POST", path("/api/v4/users/%d/personal_access_tokens", u.ID),
		jsonBody(t, map[string]any{"scopes": []string{"api"}}), admin, invalid)
	c.do(http.StatusOK, "GET", "/api/v4/user", nil, header("PRIVATE-TOKEN", tok.Token))
	c.decode(&reader, http.StatusCreated, "POST", "/api/v4/user/personal_access_tokens",
		jsonBody(t, map[string]any{"name": "reader", "scopes": []string{"read_api"}}), header("Authorization", "Bearer "+tok.Token))
	c.do(http.StatusForbidden, "POST", "/api/v4/user/personal_access_tokens",
		jsonBody(t, map[string]any{"name": "more", "scopes": []string{"api"}}), header("PRIVATE-TOKEN", reader.Token))
	c.do(http.StatusOK, "GET", "/api/v4/personal_access_tokens", nil, header("PRIVATE-TOKEN", reader.Token))
	c.do(http.StatusOK, "GET", path("/api/v4/personal_access_tokens?user_id=%d", u.ID), nil, admin)
	c.do(http.StatusOK, "GET", "/api/v4/personal_access_tokens/self", nil, header("PRIVATE-TOKEN", reader.Token))
	c.do(http.StatusOK, "GET", path("/api/v4/personal_access_tokens/%d", tok.ID), nil, admin)

	var rotated api.PersonalAccessToken
	c.decode(&rotated, http.StatusOK, "POST", path("/api/v4/personal_access_tokens/%d/rotate", tok.ID), nil, admin)
	c.do(http.StatusUnauthorized, "GET", "/api/v4/user", nil, header("PRIVATE-TOKEN", tok.Token))
	c.decode(&rotated, http.StatusOK, "POST", "/api/v4/personal_access_tokens/self/rotate?expires_at="+time.Now().UTC().AddDate(0, 0, 200).Format(time.DateOnly), nil,
		header("PRIVATE-TOKEN", rotated.Token))
	c.do(http.StatusNoContent, "DELETE", "/api/v4/personal_access_tokens/self", nil, header("PRIVATE-TOKEN", rotated.Token))
	c.do(http.StatusNoContent, "DELETE", path("/api/v4/personal_access_tokens/%d", reader.ID), nil, admin)
	c.do(http.StatusBadRequest, "DELETE", path("/api/v4/personal_access_tokens/%d", reader.ID), nil, admin)

	c.do(http.StatusCreated, "POST", one+"/block", nil, admin)
	c.do(http.StatusCreated, "POST", one+"/unblock", nil, admin)
	c.do(http.StatusNoContent, "DELETE", one, nil, admin)
}
