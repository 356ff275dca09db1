// Operator API, project members (GitLab's /projects/:id/members): who has which role on a
// project. Reading them is a guest's; changing them a maintainer's, and owners' memberships
// an owner's (builds/access).

package handlers

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
)

// memberFields is the body of POST and PUT /projects/:id/members.
type memberFields struct {
	UserID      *flexInt `json:"user_id"`
	AccessLevel *flexInt `json:"access_level"`
	// ExpiresAt is a date (YYYY-MM-DD); "" clears it on an update.
	ExpiresAt *string `json:"expires_at"`
}

// flexInt accepts a JSON number or a string of digits, as GitLab takes forms and JSON.
type flexInt int64

func (n *flexInt) UnmarshalJSON(data []byte) error {
	var v int64
	if err := json.Unmarshal(data, &v); err == nil {
		*n = flexInt(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return badRequest("expected an integer, got %.40s", data)
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return badRequest("expected an integer, got %.40q", s)
	}
	*n = flexInt(v)
	return nil
}

func (f memberFields) change() (access.MemberChange, error) {
	var c access.MemberChange
	if f.AccessLevel != nil {
		l := int(*f.AccessLevel)
		c.Level = &l
	}
	if f.ExpiresAt != nil {
		var t *time.Time
		if *f.ExpiresAt != "" {
			d, err := time.Parse(time.DateOnly, *f.ExpiresAt)
			if err != nil {
				return c, badRequest("expires_at must be a date (YYYY-MM-DD), got %.40q", *f.ExpiresAt)
			}
			t = &d
		}
		c.ExpiresAt = &t
	}
	return c, nil
}

func (h *Handler) memberView(r *http.Request, m access.Member) api.Member {
	v := api.Member{ID: m.UserID, Username: m.Username, Name: m.Name, State: m.State, WebURL: h.externalBase(r) + "/" + m.Username,
		AccessLevel: int(m.Level), CreatedAt: m.CreatedAt, MembershipState: "active"}
	if m.ExpiresAt != nil {
		s := m.ExpiresAt.Format(time.DateOnly)
		v.ExpiresAt = &s
	}
	return v
}

// memberError words the members' sentinels for the client.
func memberError(err error) error {
	var fe *access.ForbiddenError
	switch {
	case errors.Is(err, access.ErrLastOwner):
		return badRequest("%s", err.Error())
	case errors.As(err, &fe):
		return &httpError{code: http.StatusForbidden, msg: "403 Forbidden - " + fe.Msg}
	case errors.Is(err, builds.ErrExists):
		return &httpError{code: http.StatusConflict, msg: "Member already exists"}
	case errors.Is(err, builds.ErrNotFound):
		return &httpError{code: http.StatusNotFound, msg: "404 " + err.Error()}
	}
	return err
}

func (h *Handler) listMembers(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	list, total, err := h.access.Members(r.Context(), pid, r.URL.Query().Get("query"), pg)
	if err != nil {
		return memberError(err)
	}
	out := make([]api.Member, len(list))
	for i, m := range list {
		out[i] = h.memberView(r, m)
	}
	writePage(w, pg, total, out)
	return nil
}

func (h *Handler) getMember(w http.ResponseWriter, r *http.Request) error {
	pid, uid, err := projectAndID(r, "user_id")
	if err != nil {
		return err
	}
	m, err := h.access.Member(r.Context(), pid, uid)
	if err != nil {
		return memberError(err)
	}
	writeJSON(w, http.StatusOK, h.memberView(r, m))
	return nil
}

func (h *Handler) addMember(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	var f memberFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	if f.UserID == nil {
		return badRequest("user_id is missing")
	}
	c, err := f.change()
	if err != nil {
		return err
	}
	a, _ := builds.ActorFrom(r.Context())
	m, err := h.access.AddMember(r.Context(), a, pid, int64(*f.UserID), c)
	if err != nil {
		return memberError(err)
	}
	writeJSON(w, http.StatusCreated, h.memberView(r, m))
	return nil
}

func (h *Handler) updateMember(w http.ResponseWriter, r *http.Request) error {
	pid, uid, err := projectAndID(r, "user_id")
	if err != nil {
		return err
	}
	var f memberFields
	if err := decodeBody(r, &f); err != nil {
		return err
	}
	if f.UserID != nil && int64(*f.UserID) != uid {
		return badRequest("user_id in the body differs from the path's")
	}
	if f.AccessLevel == nil {
		return badRequest("access_level is missing")
	}
	c, err := f.change()
	if err != nil {
		return err
	}
	a, _ := builds.ActorFrom(r.Context())
	m, err := h.access.UpdateMember(r.Context(), a, pid, uid, c)
	if err != nil {
		return memberError(err)
	}
	writeJSON(w, http.StatusOK, h.memberView(r, m))
	return nil
}

func (h *Handler) removeMember(w http.ResponseWriter, r *http.Request) error {
	pid, uid, err := projectAndID(r, "user_id")
	if err != nil {
		return err
	}
	a, _ := builds.ActorFrom(r.Context())
	if err := h.access.RemoveMember(r.Context(), a, pid, uid); err != nil {
		return memberError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
