package contract_test

import (
	"net/http"
	"testing"

	"github.com/jobapi/jobapi/api"
)

// membersScenario gives a user a role on a project and takes it back: add, a second add,
// list (both paths), read, change, the last owner's step down refused, and removal; the
// member's token is answered 404 on a project it is not a member of.
func membersScenario(t *testing.T, c *client, projectID int64) {
	t.Helper()
	var u api.UserDetail
	c.decode(&u, http.StatusCreated, "POST", "/api/v4/users", jsonBody(t, map[string]any{
		"username": "member", "name": "Member", "email": "member@example.com"}), admin)
	var tok api.PersonalAccessToken
	c.decode(&tok, http.StatusCreated, "POST", path("/api/v4/users/%d/personal_access_tokens", u.ID),
		jsonBody(t, map[string]any{"name": "api", "scopes": []string{"api"}}), admin)
	asMember := header("PRIVATE-TOKEN", tok.Token)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/members", projectID), nil, asMember)

	members := path("/api/v4/projects/%d/members", projectID)
	var m api.Member
	c.decode(&m, http.StatusCreated, "POST", members, jsonBody(t, map[string]any{"user_id": u.ID, "access_level": 50}), admin)
	c.do(http.StatusConflict, "POST", members, jsonBody(t, map[string]any{"user_id": u.ID, "access_level": 30}), admin)
	c.do(http.StatusBadRequest, "POST", members, jsonBody(t, map[string]any{"user_id": u.ID, "access_level": 35}), admin, invalid)
	c.do(http.StatusOK, "GET", members, nil, asMember)
	c.do(http.StatusOK, "GET", members+"/all?query=mem", nil, asMember)
	one := path("/api/v4/projects/%d/members/%d", projectID, u.ID)
	c.do(http.StatusOK, "GET", one, nil, asMember)
	c.do(http.StatusOK, "PUT", one, jsonBody(t, map[string]any{"access_level": 50, "expires_at": "2999-01-01"}), asMember)
	c.do(http.StatusBadRequest, "PUT", one, jsonBody(t, map[string]any{"access_level": 40}), asMember)
	c.do(http.StatusNotFound, "GET", path("/api/v4/projects/%d/members/999999", projectID), nil, admin)
	c.do(http.StatusBadRequest, "DELETE", one, nil, admin)
	c.do(http.StatusOK, "PUT", one, jsonBody(t, map[string]any{"access_level": 50, "expires_at": ""}), admin)
	c.do(http.StatusNoContent, "DELETE", path("/api/v4/users/%d", u.ID), nil, admin)
	c.do(http.StatusNotFound, "DELETE", one, nil, admin)
}
