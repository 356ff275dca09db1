package handlers

// Users, GitLab's /users (administrators: access.ReadInstance to read, ManageInstance to
// change; h.can in routes.go) and /user (the caller). jobapi keeps no
// passwords: people sign in with personal access tokens (and the web UI's sign-in), so the
// password fields of GitLab's create are refused, and the ones that only say what to do
// with a password (reset_password, force_random_password, skip_confirmation) are accepted
// and have nothing to act on.

import (
	"net/http"
	"strings"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/users"
)

func (h *Handler) userView(r *http.Request, u users.User) api.UserDetail {
	created, updated := u.CreatedAt, u.UpdatedAt
	return api.UserDetail{User: api.User{ID: u.ID, Username: u.Username, Name: u.Name, State: string(u.State),
		Locked: u.State == users.StateBlocked, WebURL: h.externalBase(r) + "/" + u.Username, CreatedAt: &created,
		IsAdmin: u.IsAdmin}, Email: u.Email, UpdatedAt: &updated}
}

// userFields is the body of POST and PUT /users.
type userFields struct {
	Username *string  `json:"username"`
	Name     *string  `json:"name"`
	Email    *string  `json:"email"`
	Admin    *boolish `json:"admin"`
	IsAdmin  *boolish `json:"is_admin"`
	Password *string  `json:"password"`
	// Accepted for GitLab's clients; there is no password to act on.
	ResetPassword       *boolish `json:"reset_password"`
	ForceRandomPassword *boolish `json:"force_random_password"`
	SkipConfirmation    *boolish `json:"skip_confirmation"`
	SkipReconfirmation  *boolish `json:"skip_reconfirmation"`
}

func (f userFields) admin() *bool {
	for _, v := range []*boolish{f.Admin, f.IsAdmin} {
		if v != nil {
			b := bool(*v)
			return &b
		}
	}
	return nil
}

func readUserFields(r *http.Request) (userFields, error) {
	var f userFields
	if err := decodeBody(r, &f); err != nil {
		return f, err
	}
	if f.Password != nil {
		return f, badRequest("password is not taken: jobapi keeps no passwords; users sign in with personal access tokens")
	}
	return f, nil
}

func (h *Handler) createUser(w http.ResponseWriter, r *http.Request) error {
	f, err := readUserFields(r)
	if err != nil {
		return err
	}
	nu := users.NewUser{}
	for _, req := range []struct {
		name string
		v    *string
		dst  *string
	}{{"username", f.Username, &nu.Username}, {"name", f.Name, &nu.Name}, {"email", f.Email, &nu.Email}} {
		if req.v == nil {
			return badRequest("%s is missing", req.name)
		}
		*req.dst = *req.v
	}
	if a := f.admin(); a != nil {
		nu.IsAdmin = *a
	}
	u, err := h.users.CreateUser(r.Context(), nu)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, h.userView(r, u))
	return nil
}

func (h *Handler) listUsers(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := users.UserFilter{Username: q.Get("username"), Search: q.Get("search")}
	for key, state := range map[string]users.State{"active": users.StateActive, "blocked": users.StateBlocked} {
		if v := q.Get(key); v != "" {
			on, err := parseBool(v)
			if err != nil {
				return badRequest("%s must be true or false", key)
			}
			if on {
				f.State = state
			}
		}
	}
	list, total, err := h.users.Users(r.Context(), f, pg)
	if err != nil {
		return err
	}
	out := make([]api.UserDetail, len(list))
	for i, u := range list {
		out[i] = h.userView(r, u)
	}
	writePage(w, pg, total, out)
	return nil
}

func (h *Handler) getUserByID(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "user_id")
	if err != nil {
		return err
	}
	u, err := h.users.User(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.userView(r, u))
	return nil
}

func (h *Handler) updateUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "user_id")
	if err != nil {
		return err
	}
	f, err := readUserFields(r)
	if err != nil {
		return err
	}
	u, err := h.users.UpdateUser(r.Context(), id, users.UserChange{Username: f.Username, Name: f.Name, Email: f.Email, IsAdmin: f.admin()})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.userView(r, u))
	return nil
}

func (h *Handler) deleteUser(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "user_id")
	if err != nil {
		return err
	}
	if err := h.users.DeleteUser(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setUserState is GitLab's POST /users/:id/block and /unblock: 201 with true.
func (h *Handler) setUserState(state users.State) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r, "user_id")
		if err != nil {
			return err
		}
		if _, err := h.users.UpdateUser(r.Context(), id, users.UserChange{State: &state}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, true)
		return nil
	}
}

// getUser is GitLab's GET /user: who the token belongs to (python-gitlab's gl.auth()). The
// admin token's holder is GitLab's user 1, the administrator, who has no row.
func (h *Handler) getUser(w http.ResponseWriter, r *http.Request) error {
	a, _ := builds.ActorFrom(r.Context())
	if a.Kind != builds.ActorUser {
		writeJSON(w, http.StatusOK, adminUser(h.externalBase(r)))
		return nil
	}
	u, err := h.users.User(r.Context(), a.UserID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.userView(r, u))
	return nil
}

// needUsers answers 501 where the server has no users service (handler tests without one).
func (h *Handler) needUsers(fn func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if h.users == nil {
			return &httpError{code: http.StatusNotImplemented, msg: "501 Not Implemented - this server has no users"}
		}
		return fn(w, r)
	}
}

// expiresAtField reads GitLab's expires_at: a date (YYYY-MM-DD), or a time of which the
// date counts.
func expiresAtField(v string) (*time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	for _, layout := range []string{time.DateOnly, time.RFC3339} {
		if t, err := time.Parse(layout, v); err == nil {
			return &t, nil
		}
	}
	return nil, badRequest("expires_at must be a date (YYYY-MM-DD), got %.40q", v)
}
